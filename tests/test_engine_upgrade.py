"""Upgrading gcu-stack itself: a stack deployed by an earlier release of this program, previewed with this one.

The earlier program comes from git (`git archive` of the release commit) and deploys the
seed blueprint on a real control plane with the real engine; the current program then
previews the same stack. Moving a URN or changing an input would show here as a
replacement or an update of objects running on users' clusters.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile

import pytest
from engine import GCU_NODE_LABELS, GCUS, PROJECT_FILES, changes, engine_stack
from pulumi import automation as auto
from realservers import PROJECT_DIR

# The last commit before the architecture refactor (the landed day-1 release).
BASELINE = "b77caa7"
# The GCU nodes advertise enflame.com/gcu as their device plugin would (GCUS): post-deploy validation needs it.
NODES = [("gcu-node-1", GCU_NODE_LABELS, GCUS), ("gcu-node-2", GCU_NODE_LABELS, GCUS), ("cpu-node-1", {})]


def export_release(commit: str, target) -> None:
    """The project files of `commit`, as a user's checkout of that release would have them."""
    archive = subprocess.run(
        ["git", "-C", str(PROJECT_DIR), "archive", "--format=tar", commit, *PROJECT_FILES],
        capture_output=True, check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    (target / ".venv").symlink_to(PROJECT_DIR / ".venv")
    (target / "policies" / ".venv").symlink_to(PROJECT_DIR / ".venv")


# What this release changes on a stack the earlier release deployed, and why; nothing else may change,
# and nothing is ever replaced or deleted.
EXPECTED = {
    # containerd support: the toolkit reads its node's runtime (RBAC), mounts containerd's directories, and the
    # activation resource (DockerRuntime before, aliased) takes both runtimes' settings; its update on docker
    # nodes whose daemon.json is already right changes nothing there.
    "update": {
        "DaemonSet::toolkit-daemonset", "ContainerRuntime::container-runtime",
        # Safe driver upgrades and real kubelets: the agents holding the GCU device leave a node while its
        # driver is replaced (node affinity), and keep their termination log out of the host's /dev.
        "DaemonSet::devicePlugin-daemonset", "DaemonSet::exporter-daemonset", "DaemonSet::gfd-daemonset",
        # A NodePort Service names the workload it fronts, so a rename previews without the node-port clash.
        "Service::exporter-service",
    },
    "create": {
        "ServiceAccount::toolkit-serviceaccount", "ClusterRole::toolkit-clusterrole",
        "ClusterRoleBinding::toolkit-clusterrolebinding", "RuntimeClass::toolkit-runtimeclass-enflame",
        # Post-deploy validation (issue 15): a new step, created on the first up; nothing of the release changes for it.
        "GcuValidation::gcu-validation",
    },
}


def steps_by_op(events: list) -> dict[str, set[str]]:
    """op -> {"Type::name"} from the engine's preview events (type without its package)."""
    found: dict[str, set[str]] = {}
    for event in events:
        pre = event.resource_pre_event
        if pre is None or pre.metadata is None:
            continue
        op = str(getattr(pre.metadata.op, "value", pre.metadata.op))
        if op in ("same", "read"):
            continue
        urn = pre.metadata.urn
        found.setdefault(op, set()).add(f"{urn.split('::')[-2].rsplit(':', 1)[-1]}::{urn.split('::')[-1]}")
    return found


@pytest.fixture(scope="module")
def deployed_by_the_release(tmp_path_factory):
    root = tmp_path_factory.mktemp("upgrade")
    with engine_stack(root, NODES, "upgrade", check_destroy=True) as current:
        old_dir = root / "release"
        export_release(BASELINE, old_dir)
        # The same stack, config and secrets salt: only the program differs.
        shutil.copy2(root / "project" / "Pulumi.upgrade.yaml", old_dir / "Pulumi.upgrade.yaml")
        release = auto.Stack.select(
            "upgrade",
            auto.LocalWorkspace(work_dir=str(old_dir), pulumi_home=str(root / "home"), env_vars=current.stack.workspace.env_vars),
        )
        release.up(on_output=lambda _: None)
        yield release, current.stack, current.policy_config


def test_the_release_deployed_the_seed(deployed_by_the_release):
    release, _, _ = deployed_by_the_release
    assert release.outputs()["readyResource"].value == "5/5"


def test_this_program_changes_only_what_it_must_on_a_stack_the_release_deployed(deployed_by_the_release):
    _, current, policy_config = deployed_by_the_release
    events: list = []
    current.preview(
        policy_packs=[current.workspace.work_dir + "/policies"], policy_pack_configs=[str(policy_config)], on_event=events.append
    )
    assert steps_by_op(events) == {op: names for op, names in EXPECTED.items() if names}
    result = current.up(on_output=lambda _: None)
    assert set(changes(result.summary.resource_changes)) <= {"update", "create"}
    assert current.outputs()["readyResource"].value == "5/5"
    # Then the stack is this release's: another up changes nothing.
    again = current.up(on_output=lambda _: None)
    assert changes(again.summary.resource_changes) == {}
