"""ContainerRuntime on docker nodes against a real dockerd: activation, exact restore, refusal of broken files."""

import json
import subprocess
from pathlib import Path

import pytest
from realservers import PROJECT_DIR, PYTHON, reload_count, runtime_props, start_dockerd, stop_dockerd, write_raw

from components.node import runtime_host
from components.providers.container_runtime import ContainerRuntimeProvider

# Deliberately odd formatting: restore must give back these bytes, not a re-rendering.
ORIGINAL = '{\n    "log-level": "info",\n  "labels": ["gcu-test=1"],\n\t"max-concurrent-downloads": 3\n}\n'


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("dockerd")
    daemon = start_dockerd(state_dir)
    daemon.ensure_base_image()
    yield daemon
    stop_dockerd(state_dir)


@pytest.fixture
def fresh(dockerd):
    """Original config in place and loaded, one long-running container, as on a busy GCU node."""
    reset_to_runc(dockerd)
    runtime_host.LocalHost(runtime_host.HostSettings(daemon_json=str(dockerd.config_file))).remove(
        str(dockerd.config_file) + runtime_host.BACKUP_SUFFIX
    )
    wait_default_runtime(dockerd, "runc")
    container = dockerd.docker("run", "-d", "--network", "none", "gcu-test-base:latest", "sleep", "3600").stdout.strip()
    yield container
    dockerd.docker("rm", "-f", container, check=False)


def reset_to_runc(dockerd):
    # dockerd's reload keeps keys a file omits, so say runc explicitly, then put ORIGINAL back.
    Path(dockerd.config_file).write_text('{"default-runtime": "runc", "runtimes": {}}')
    dockerd.reload()
    wait_default_runtime(dockerd, "runc")
    write_raw(dockerd.config_file, ORIGINAL)


def wait_default_runtime(dockerd, wanted, seconds=10):
    import time

    deadline = time.monotonic() + seconds
    while dockerd.info().get("DefaultRuntime") != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    assert dockerd.info().get("DefaultRuntime") == wanted


def started_at(dockerd, container):
    state = json.loads(dockerd.docker("inspect", container).stdout)[0]["State"]
    return state["Running"], state["StartedAt"], state["Pid"]


def test_reload_activates_without_touching_running_containers(dockerd, fresh):
    before = started_at(dockerd, fresh)
    reloads = reload_count(dockerd)
    result = ContainerRuntimeProvider().create(runtime_props(dockerd))
    assert dockerd.info()["DefaultRuntime"] == "enflame"
    assert started_at(dockerd, fresh) == before  # same process, never restarted
    assert reload_count(dockerd) == reloads + 1
    outputs = result.outs
    assert outputs["active"] is True
    assert list(outputs["hosts"]) == ["local"] and outputs["hosts"]["local"]["nodes"] == ["gcu-node-1", "gcu-node-2"]
    config = json.loads(Path(dockerd.config_file).read_text())
    assert config["default-runtime"] == "enflame"
    assert config["runtimes"]["enflame"] == {"path": dockerd.runc_path}
    # Unrelated keys survive.
    assert config["log-level"] == "info" and config["labels"] == ["gcu-test=1"] and config["max-concurrent-downloads"] == 3
    # New containers get the runtime.
    new = dockerd.docker("run", "-d", "--network", "none", "gcu-test-base:latest", "sleep", "5").stdout.strip()
    assert json.loads(dockerd.docker("inspect", new).stdout)[0]["HostConfig"]["Runtime"] == "enflame"
    dockerd.docker("rm", "-f", new)
    ContainerRuntimeProvider().delete("container-runtime", outputs)


def test_delete_restores_the_original_bytes_and_runtime(dockerd, fresh):
    outputs = ContainerRuntimeProvider().create(runtime_props(dockerd)).outs
    ContainerRuntimeProvider().delete("container-runtime", outputs)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()
    wait_default_runtime(dockerd, "runc")
    assert not Path(str(dockerd.config_file) + runtime_host.BACKUP_SUFFIX).exists()
    assert started_at(dockerd, fresh)[0] is True


def test_delete_after_someone_else_edited_removes_only_our_keys(dockerd, fresh):
    outputs = ContainerRuntimeProvider().create(runtime_props(dockerd)).outs
    config = json.loads(Path(dockerd.config_file).read_text())
    config["debug"] = True
    Path(dockerd.config_file).write_text(json.dumps(config))
    ContainerRuntimeProvider().delete("container-runtime", outputs)
    after = json.loads(Path(dockerd.config_file).read_text())
    assert after == {**json.loads(ORIGINAL), "debug": True}
    wait_default_runtime(dockerd, "runc")


def test_unchanged_content_is_not_reloaded_again(dockerd, fresh):
    provider = ContainerRuntimeProvider()
    outputs = provider.create(runtime_props(dockerd)).outs
    reloads = reload_count(dockerd)
    again = provider.update("container-runtime", outputs, runtime_props(dockerd)).outs
    assert reload_count(dockerd) == reloads
    assert again["active"] is True
    # The original recorded by the first activation stays authoritative.
    assert again["hosts"]["local"]["original"] == outputs["hosts"]["local"]["original"]
    provider.delete("container-runtime", again)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()


def test_invalid_daemon_json_is_refused_and_left_as_it_was(dockerd, fresh):
    broken = write_raw(dockerd.config_file, '{"log-level": "info",\n  "labels": [\n')
    reloads = reload_count(dockerd)
    with pytest.raises(RuntimeError) as caught:
        ContainerRuntimeProvider().create(runtime_props(dockerd))
    message = str(caught.value)
    assert "gcu-node-1" in message and str(dockerd.config_file) in message and "not valid JSON" in message
    assert Path(dockerd.config_file).read_bytes() == broken
    assert not Path(str(dockerd.config_file) + runtime_host.BACKUP_SUFFIX).exists()
    assert reload_count(dockerd) == reloads


def test_mode_none_writes_but_does_not_signal(dockerd, fresh):
    reloads = reload_count(dockerd)
    outputs = ContainerRuntimeProvider().create(runtime_props(dockerd, mode="none")).outs
    assert json.loads(Path(dockerd.config_file).read_text())["default-runtime"] == "enflame"
    assert reload_count(dockerd) == reloads
    assert dockerd.info()["DefaultRuntime"] == "runc"
    assert "only after its next restart" in outputs["message"]
    ContainerRuntimeProvider().delete("container-runtime", outputs)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()
    assert reload_count(dockerd) == reloads


def test_failed_verification_puts_the_previous_file_back_and_names_the_node(dockerd, fresh, tmp_path):
    # A pid file pointing at a bystander: the "reload" reaches the wrong process, docker never switches.
    bystander = subprocess.Popen(["sleep", "600"])
    pid_file = tmp_path / "wrong.pid"
    pid_file.write_text(str(bystander.pid))
    try:
        with pytest.raises(RuntimeError) as caught:
            ContainerRuntimeProvider().create(runtime_props(dockerd, pidFile=str(pid_file), verifySeconds=2))
    finally:
        bystander.kill()
    assert "gcu-node-1" in str(caught.value) and "put back" in str(caught.value)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()
    assert not Path(str(dockerd.config_file) + runtime_host.BACKUP_SUFFIX).exists()
    assert dockerd.info()["DefaultRuntime"] == "runc"


def test_restart_mode_restarts_docker_and_restores(dockerd, fresh):
    outputs = ContainerRuntimeProvider().create(runtime_props(dockerd, mode="restart")).outs
    assert outputs["active"] is True
    assert dockerd.info()["DefaultRuntime"] == "enflame"
    ContainerRuntimeProvider().delete("container-runtime", outputs)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()
    wait_default_runtime(dockerd, "runc")


def test_refresh_reports_drift_and_update_repairs_it(dockerd, fresh):
    provider = ContainerRuntimeProvider()
    outputs = provider.create(runtime_props(dockerd)).outs
    reset_to_runc(dockerd)  # someone put the old file back and reloaded docker
    refreshed = provider.read("container-runtime", outputs).outs
    assert refreshed["drift"] and refreshed["active"] is False
    assert provider.diff("container-runtime", refreshed, runtime_props(dockerd)).changes is True
    repaired = provider.update("container-runtime", refreshed, runtime_props(dockerd)).outs
    assert repaired["active"] is True and dockerd.info()["DefaultRuntime"] == "enflame"
    provider.delete("container-runtime", repaired)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()


def test_diff_ignores_the_serialized_provider_and_never_replaces(dockerd):
    props = runtime_props(dockerd)
    olds = {**props, "__provider": "old-pickle", "hosts": {}, "active": True, "message": "", "drift": []}
    same = ContainerRuntimeProvider().diff("container-runtime", olds, {**props, "__provider": "new-pickle"})
    assert same.changes is False
    changed = ContainerRuntimeProvider().diff("container-runtime", olds, {**props, "docker": {**props["docker"], "mode": "restart"}})
    assert changed.changes is True and not changed.replaces


def test_the_toolkit_entrypoint_cli_agrees_with_the_provider(dockerd, fresh):
    """The toolkit image runs runtime_host.py at start: same activation, restorable by the provider state."""
    script = PROJECT_DIR / "components" / "node" / "runtime_host.py"
    common = ["--daemon-json", str(dockerd.config_file), "--docker-host", dockerd.host, "--pid-file", str(dockerd.pidfile), "--node", "new-node"]
    done = subprocess.run([PYTHON, str(script), "activate", "--runtime-path", dockerd.runc_path, *common], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    state = json.loads(done.stdout.splitlines()[-1])
    assert state["active"] is True and dockerd.info()["DefaultRuntime"] == "enflame"
    # The provider, arriving later, sees the file already right, keeps the true original from the backup.
    outputs = ContainerRuntimeProvider().create(runtime_props(dockerd)).outs
    assert outputs["hosts"]["local"]["changed"] is False
    ContainerRuntimeProvider().delete("container-runtime", outputs)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()
    broken = write_raw(dockerd.config_file, "{nope")
    refused = subprocess.run([PYTHON, str(script), "activate", "--runtime-path", "/x", *common], capture_output=True, text=True)
    assert refused.returncode == 1 and "new-node" in json.loads(refused.stdout)["error"]
    assert Path(dockerd.config_file).read_bytes() == broken


def test_no_gcu_node_touches_nothing_and_counts_as_done(dockerd, fresh):
    reloads = reload_count(dockerd)
    outputs = ContainerRuntimeProvider().create(runtime_props(dockerd, nodes=())).outs
    assert outputs["hosts"] == {} and outputs["active"] is True and outputs["message"] == "no GCU node"
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()
    assert reload_count(dockerd) == reloads


def test_a_docker_runtime_from_an_earlier_release_updates_in_place_without_a_reload(dockerd, fresh):
    """State an earlier release wrote (DockerRuntime: docker settings at the top level) is read as docker's."""
    provider = ContainerRuntimeProvider()
    outputs = provider.create(runtime_props(dockerd)).outs
    earlier = {k: v for k, v in outputs.items() if k not in ("docker", "containerd", "runtime", "runtimes", "unsupported")}
    earlier.update({k: outputs["docker"][k] for k in ("transport", "mode", "runtimePath", "daemonJson", "dockerHost",
                                                     "pidFile", "restartCommand", "verifySeconds")})
    earlier["hosts"] = {h: {k: v for k, v in s.items() if k != "runtime"} for h, s in outputs["hosts"].items()}
    reloads = reload_count(dockerd)
    assert provider.diff("container-runtime", earlier, runtime_props(dockerd)).changes is True  # new inputs
    updated = provider.update("container-runtime", earlier, runtime_props(dockerd)).outs
    assert reload_count(dockerd) == reloads  # nothing on the node changed
    assert updated["hosts"]["local"]["original"] == outputs["hosts"]["local"]["original"]
    provider.delete("container-runtime", updated)
    assert Path(dockerd.config_file).read_bytes() == ORIGINAL.encode()


def test_an_edit_after_activation_survives_a_no_op_update_and_the_restore(dockerd, fresh):
    """What gcu-stack wrote is remembered across updates: someone's later edit is theirs, and stays."""
    provider = ContainerRuntimeProvider()
    outputs = provider.create(runtime_props(dockerd)).outs
    config = json.loads(Path(dockerd.config_file).read_text())
    config["debug"] = True  # an operator's edit, our keys untouched
    Path(dockerd.config_file).write_text(json.dumps(config))
    again = provider.update("container-runtime", outputs, runtime_props(dockerd)).outs
    assert again["hosts"]["local"]["changed"] is False
    provider.delete("container-runtime", again)
    restored = json.loads(Path(dockerd.config_file).read_text())
    assert restored.get("debug") is True and "default-runtime" not in restored and "enflame" not in (restored.get("runtimes") or {})
