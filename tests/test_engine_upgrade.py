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
from pulumi import automation as auto

from engine import PROJECT_FILES, prepare_stack
from realservers import PROJECT_DIR, start_dockerd, stop_dockerd

# The last commit before the architecture refactor (the landed day-1 release).
BASELINE = "b77caa7"
NFD = "feature.node.kubernetes.io/pci-1e36.present"
DRIVER = "enflame.com/gcu.driver.present"
NODES = [("gcu-node-1", {NFD: "true", DRIVER: "true"}), ("gcu-node-2", {NFD: "true", DRIVER: "true"}), ("cpu-node-1", {})]


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


def changes(summary: dict) -> dict:
    return {op: n for op, n in summary.items() if op != "same" and n}


@pytest.fixture(scope="module")
def deployed_by_the_release(tmp_path_factory):
    from devtools.localcluster import LocalCluster

    root = tmp_path_factory.mktemp("upgrade")
    cluster = LocalCluster(root / "cluster", nodes=NODES, audit=False).start()
    dockerd = start_dockerd(root / "docker")
    try:
        current, policy_config = prepare_stack(root, cluster, dockerd, name="upgrade")
        old_dir = root / "release"
        export_release(BASELINE, old_dir)
        # The same stack, config and secrets salt: only the program differs.
        shutil.copy2(root / "project" / "Pulumi.upgrade.yaml", old_dir / "Pulumi.upgrade.yaml")
        release = auto.Stack.select(
            "upgrade",
            auto.LocalWorkspace(work_dir=str(old_dir), pulumi_home=str(root / "home"), env_vars=current.workspace.env_vars),
        )
        release.up(on_output=lambda _: None)
        yield release, current, policy_config
        current.destroy(on_output=lambda _: None)
    finally:
        cluster.stop()
        stop_dockerd(root / "docker")


def test_the_release_deployed_the_seed(deployed_by_the_release):
    release, _, _ = deployed_by_the_release
    assert release.outputs()["readyResource"].value == "5/5"


def test_this_program_previews_no_change_on_a_stack_the_release_deployed(deployed_by_the_release):
    _, current, policy_config = deployed_by_the_release
    preview = current.preview(policy_packs=[current.workspace.work_dir + "/policies"], policy_pack_configs=[str(policy_config)])
    assert changes(preview.change_summary) == {}, preview.stdout[-3000:]
    result = current.up(on_output=lambda _: None)
    assert changes(result.summary.resource_changes) == {}
    assert current.outputs()["readyResource"].value == "5/5"
