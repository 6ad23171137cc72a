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
from contextlib import contextmanager
from typing import Iterator

import pytest
from engine import GCU_NODE_LABELS, GCUS, PROJECT_FILES, Engine, changes, engine_stack, node, up_converged
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


# What the first up of this release changes on any earlier release's stack (issue 20): the cluster is recorded
# (two ClusterGuards and their explicit provider), the Kubernetes provider gets its pinned context, and each
# bundled resource is updated once to record the cluster's UID and that context. Nothing changes on the nodes.
RECORDS_THE_CLUSTER = {
    "create": {"ClusterGuard::cluster", "ClusterGuard::cluster-check", "pulumi-python::gcu-cluster"},
    "update": {"kubernetes::k8s", "GcuNodes::gcu-nodes", "ContainerRuntime::container-runtime", "GcuValidation::gcu-validation"},
}


# NFD's labels, taken off the nodes when NFD goes (issue 21): a new resource, created by the first up of this release.
TAKES_NFD_LABELS_OFF = {"create": {"NfdLabels::nfd-labels"}}


def merged(*changes: dict) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for change in changes:
        for op, names in change.items():
            found.setdefault(op, set()).update(names)
    return found


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


@contextmanager
def deployed_by(commit: str, name: str, tmp_path_factory) -> Iterator[tuple[auto.Stack, Engine]]:
    """A stack `name` that the program of `commit` deployed (`up`) on fresh servers, and this program's view of it."""
    root = tmp_path_factory.mktemp(name)
    with engine_stack(root, NODES, name, check_destroy=True) as current:
        old_dir = root / "release"
        export_release(commit, old_dir)
        # The same stack, config and secrets salt: only the program differs.
        shutil.copy2(root / "project" / f"Pulumi.{name}.yaml", old_dir / f"Pulumi.{name}.yaml")
        release = auto.Stack.select(
            name,
            auto.LocalWorkspace(work_dir=str(old_dir), pulumi_home=str(root / "home"), env_vars=current.stack.workspace.env_vars),
        )
        release.up(on_output=lambda _: None)
        yield release, current


@pytest.fixture(scope="module")
def deployed_by_the_release(tmp_path_factory):
    with deployed_by(BASELINE, "upgrade", tmp_path_factory) as (release, current):
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
    # GcuValidation is created by this release (EXPECTED), not updated.
    recorded = {op: names - EXPECTED["create"] for op, names in RECORDS_THE_CLUSTER.items()}
    assert steps_by_op(events) == merged(EXPECTED, recorded, TAKES_NFD_LABELS_OFF)
    result = current.up(on_output=lambda _: None)
    assert set(changes(result.summary.resource_changes)) <= {"update", "create"}
    assert current.outputs()["readyResource"].value == "5/5"
    # Then the stack is this release's: another up changes nothing.
    again = up_converged(current)
    assert changes(again.summary.resource_changes) == {}


# ---------------------------------------------------------------------------- the module move (architecture II)

# The last landed commit before the providers moved from components/hoststate/ to components/providers/ (and the
# node code to components/node/): its state pickles each dynamic provider under its old module path.
BEFORE_THE_MOVE = "b115639"


def provider_modules(stack: auto.Stack) -> set[str]:
    """The module paths the state's dynamic providers are pickled under (dill names the module of the class)."""
    import base64
    import re

    found = set()
    for resource in stack.export_stack().deployment["resources"]:
        pickled = (resource.get("inputs") or {}).get("__provider")
        if pickled:
            found |= set(re.findall(r"components\.[a-z_.]*[a-z_]", base64.b64decode(pickled).decode("latin-1")))
    return found


@pytest.fixture(scope="module")
def deployed_before_the_move(tmp_path_factory):
    with deployed_by(BEFORE_THE_MOVE, "moved", tmp_path_factory) as (release, current):
        assert release.outputs()["readyResource"].value == "5/5"
        yield current


def test_a_stack_deployed_before_the_move_previews_refreshes_updates_and_destroys(deployed_before_the_move):
    current = deployed_before_the_move
    old_paths = {m for m in provider_modules(current.stack) if m.startswith("components.hoststate.")}
    # Its state names the providers by their old paths: what the shims in components/hoststate/ serve.
    assert old_paths >= {"components.hoststate.gcu_nodes", "components.hoststate.container_runtime",
                         "components.hoststate.validation"}, old_paths
    # The move kept every URN and input: nothing to change but recording the cluster.
    events: list = []
    current.stack.preview(on_event=events.append, on_output=lambda _: None)
    assert steps_by_op(events) == merged(RECORDS_THE_CLUSTER, TAKES_NFD_LABELS_OFF)
    # refresh reads every dynamic resource through the provider pickled in its state (old paths).
    current.stack.refresh(on_output=lambda _: None)
    # An update of one dynamic resource, targeted so that the others keep their old-path providers for the destroy.
    current.stack.set_config("gcu-stack:gcuNodes", auto.ConfigValue('{"pageSize": 250}'))
    (labels_urn,) = [r["urn"] for r in current.stack.export_stack().deployment["resources"] if r["urn"].endswith("::gcu-nodes")]
    prefix = labels_urn.split("::")[0] + "::" + labels_urn.split("::")[1] + "::"
    # With the cluster it now records, which it waits for.
    guard = [prefix + "pulumi:providers:pulumi-python::gcu-cluster", prefix + "pulumi-python:dynamic/gcu:ClusterGuard::cluster"]
    events = []
    current.stack.up(target=[labels_urn, *guard], on_output=lambda _: None, on_event=events.append)
    # (The engine updates a provider whose inputs changed whatever the targets: the pinned context.)
    assert steps_by_op(events) == {"update": {"GcuNodes::gcu-nodes", "kubernetes::k8s"},
                                   "create": {"ClusterGuard::cluster", "pulumi-python::gcu-cluster"}}
    modules = provider_modules(current.stack)
    assert "components.providers.node_labels" in modules and "components.hoststate.container_runtime" in modules, modules
    # destroy deletes through the providers in the state: every label gcu-stack set is gone from the nodes.
    current.stack.destroy(on_output=lambda _: None)
    for name in ("gcu-node-1", "gcu-node-2"):
        labels = node(current.cluster, name)["metadata"].get("labels") or {}
        assert not [k for k in labels if k.startswith("enflame.com/gcu.deploy.") or k == "enflame.com/gcu.present"], labels
    assert current.stack.export_stack().deployment.get("resources") in (None, [])
