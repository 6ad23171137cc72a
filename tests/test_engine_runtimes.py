"""A mixed cluster in one stack, end to end with the real engine: a docker node, a containerd node and a
CRI-O node (simulated nodes reporting each runtime), the local transport pointed at a private real
dockerd and a private real containerd.

As an operator would, in order: preview (the CRI-O node named and left alone), up (both runtimes
activated, a running containerd container undisturbed), a no-op up (nothing restarted or reloaded),
refresh showing a removed drop-in as drift, the next up repairing it, destroy restoring both files
byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from engine import GCU_NODE_LABELS, GCUS, changes, engine_stack, outputs, set_json_config, up_converged
from harness import CONTAINER_RUNTIME
from pulumi import automation as auto
from realservers import PROJECT_DIR, PYTHON, reload_count

from components.node import cri_client
from devtools import start_time
from devtools.containerd import Containerd

# Outside CI's time budget: scripts/test-extended.sh runs this module (tests/conftest.py EXTENDED).
pytestmark = pytest.mark.extended

NODES = [
    ("gcu-docker-1", GCU_NODE_LABELS, GCUS),
    ("gcu-containerd-1", GCU_NODE_LABELS, {"runtime": "containerd://1.6.20", **GCUS}),
    ("gcu-crio-1", GCU_NODE_LABELS, {"runtime": "cri-o://1.28.1", **GCUS}),
    ("cpu-node-1", {}),
]
DOCKER_ORIGINAL = b'{\n  "log-level": "warn"\n}\n'


def containerd_cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "devtools.containerd", *args, "--state-dir", str(state_dir)],
                          cwd=PROJECT_DIR, capture_output=True, text=True, check=True, timeout=300)


class Mixed:
    def __init__(self, root: Path, cluster, dockerd, containerd: Containerd):
        self.root, self.cluster, self.dockerd, self.containerd = root, cluster, dockerd, containerd
        self.dropin = containerd.workdir / "conf.d" / "99-enflame.toml"

    def restarts(self) -> int:
        return len(self.containerd.restarts())

    def cri_runtimes(self) -> dict:
        return cri_client.runtimes(self.containerd.address)

    def runtime_state(self, stack: auto.Stack) -> dict:
        resources = stack.export_stack().deployment["resources"]
        (runtime,) = [r for r in resources if r["type"] == CONTAINER_RUNTIME]
        return runtime["outputs"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtimes")
    containerd_dir = root / "containerd"
    try:
        with engine_stack(root, NODES, "mixed") as engine:
            containerd_cli(containerd_dir, "up")
            containerd = Containerd.from_state_dir(containerd_dir)
            dockerd = engine.dockerd
            Path(dockerd.config_file).write_text('{"default-runtime": "runc", "runtimes": {}}')
            dockerd.reload()
            Path(dockerd.config_file).write_bytes(DOCKER_ORIGINAL)
            env = Mixed(root, engine.cluster, dockerd, containerd)
            env.config_original = containerd.config_file.read_bytes()
            env.workload = f"keep-running-{os.getpid()}"  # containerd IDs are per machine: unique per run
            containerd.run_container(env.workload, "sleep", "3600")
            set_json_config(engine.stack, "containerd", {
                "transport": "local",
                "configToml": str(containerd.config_file),
                "dropin": str(env.dropin),
                "address": containerd.address,
                "restartCommand": containerd.restart_command(),
                "runtimePath": containerd.runc_path,
                "verifySeconds": 20,
            })
            policy = json.loads(engine.policy_config.read_text())
            policy["host-paths-allowed"]["allowedHostPaths"]["toolkit"] += [str(containerd.workdir), str(Path(containerd.address).parent)]
            engine.policy_config.write_text(json.dumps(policy))
            env.stack, env.policy_config = engine.stack, engine.policy_config
            yield env
    finally:
        subprocess.run([PYTHON, "-m", "devtools.containerd", "down", "--state-dir", str(containerd_dir)],
                       cwd=PROJECT_DIR, capture_output=True, timeout=120)


def test_1_preview_names_the_node_whose_runtime_is_left_alone(mixed):
    result = mixed.stack.preview(policy_packs=[str(mixed.root / "project" / "policies")],
                                 policy_pack_configs=[str(mixed.policy_config)])
    assert "GCU node gcu-crio-1 runs cri-o://1.28.1" in result.stdout and "left alone" in result.stdout


def test_2_up_activates_each_node_through_its_own_runtime(mixed):
    pid = mixed.containerd.task_pid(mixed.workload)
    started = start_time(pid)
    reloads = reload_count(mixed.dockerd)
    up_converged(mixed.stack)
    out = outputs(mixed.stack)
    assert out["phase"] == "Running" and out["readyResource"] == "5/5"
    state = mixed.runtime_state(mixed.stack)
    assert state["runtimes"] == {"gcu-docker-1": "docker", "gcu-containerd-1": "containerd"}
    assert state["unsupported"] == {"gcu-crio-1": "cri-o://1.28.1"}
    assert mixed.dockerd.info()["DefaultRuntime"] == "enflame" and reload_count(mixed.dockerd) == reloads + 1
    seen = mixed.cri_runtimes()
    assert seen["default"] == "enflame" and "enflame" in seen["runtimes"]
    assert mixed.restarts() == 1
    # containerd restarted; the container it ran before did not.
    assert mixed.containerd.task_pid(mixed.workload) == pid and start_time(pid) == started
    assert mixed.dropin.exists() and str(mixed.dropin) in mixed.containerd.config_file.read_text()


def test_3_a_second_up_with_nothing_changed_restarts_nothing(mixed):
    restarts, reloads = mixed.restarts(), reload_count(mixed.dockerd)
    result = up_converged(mixed.stack)
    assert changes(result.summary.resource_changes) == {}
    assert mixed.restarts() == restarts and reload_count(mixed.dockerd) == reloads


def test_4_refresh_shows_a_removed_dropin_and_up_repairs_it(mixed):
    mixed.dropin.unlink()
    mixed.stack.refresh(on_output=lambda _: None)
    drift = mixed.runtime_state(mixed.stack)["drift"]
    assert any(d.startswith("local-containerd:") and "99-enflame.toml is missing" in d for d in drift), drift
    restarts = mixed.restarts()
    repaired = up_converged(mixed.stack)
    assert changes(repaired.summary.resource_changes).get("update", 0) >= 1
    assert mixed.dropin.exists() and mixed.restarts() == restarts + 1
    assert mixed.cri_runtimes()["default"] == "enflame"
    assert mixed.runtime_state(mixed.stack)["drift"] == []


def test_5_destroy_restores_both_files_byte_for_byte(mixed):
    mixed.stack.destroy(on_output=lambda _: None)
    assert Path(mixed.dockerd.config_file).read_bytes() == DOCKER_ORIGINAL
    assert mixed.dockerd.info()["DefaultRuntime"] == "runc"
    assert mixed.containerd.config_file.read_bytes() == mixed.config_original
    assert not mixed.dropin.exists()
    assert "enflame" not in mixed.cri_runtimes()["runtimes"]
    assert mixed.containerd.task_status(mixed.workload) == "RUNNING"
