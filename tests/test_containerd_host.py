"""The enflame runtime on a real containerd 1.6.20 (and 2.4 for config versions 3 and 4): activation, exact restore, refusals, drift, the CRI client.

Every test that restarts containerd uses a private instance (devtools.containerd) whose
restart command is `python -m devtools.containerd restart`, which logs each restart: that
log is how "no restart" is counted. Config versions 3 and 4 (containerd 2.x) are tested at the file level here:
what is written, read back with tomllib and by containerd 2.4's own `config dump` (the binary the real nodes run,
built by kube.sh); the toolkit activating containerd 2 from its pod is test_engine_realnode.py's.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import shlex
import shutil
import subprocess
import tomllib
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from realservers import PROJECT_DIR, PYTHON

from components.node import NODE_FILES, cri_client
from components.node import containerd_host as ch
from devtools import start_time
from devtools.containerd import Containerd
from devtools.realnode import containerd2_bin_dir

NODE = "gcu-node-1"
CRI = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"
_ids = itertools.count()


def original_text(d: Containerd, runtimes: bool = True, imports: str = "") -> str:
    """A node's config.toml, formatted unevenly on purpose: restore must give back these very bytes."""
    runc = (
        f'    [plugins."{CRI}".containerd.runtimes.runc]\n'
        '      runtime_type = "io.containerd.runc.v2"\n'
        f'      [plugins."{CRI}".containerd.runtimes.runc.options]\n'
        "        SystemdCgroup = false\n"
    ) if runtimes else ""
    return (
        "# containerd config of a GCU node (odd formatting on purpose)\n"
        "version   = 2\n"
        f"{imports}"
        f"root = '{d.root}'\n"
        f'state = "{d.state}"\n'
        "oom_score = 0\n"
        "\n"
        f'[grpc]\n\taddress = "{d.socket}"\n'
        "\n"
        f'[plugins."{CRI}"]\n'
        '    sandbox_image = "gcu-test/pause:3.9"   # a local image\n'
        "    restrict_oom_score_adj = true\n"
        "    disable_apparmor = true\n"
        "    max_container_log_line_size = 8192\n"
        f'  [plugins."{CRI}".containerd]\n'
        '    snapshotter = "native"\n'
        f"{runc}"
        f'  [plugins."{CRI}".cni]\n'
        '    bin_dir = "/usr/lib/cni"\n'
        f'    conf_dir = "{d.workdir / "cni"}"\n'
        f'  [plugins."{CRI}".registry.mirrors."registry.local"]\n'
        '    endpoint = ["http://127.0.0.1:5000"]\n'
        '[plugins."io.containerd.gc.v1.scheduler"]\n'
        "  pause_threshold = 0.03\n"
    )


@dataclass
class Workload:
    id: str
    pid: int
    started: int


@pytest.fixture(scope="module")
def containerd(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("containerd")
    subprocess.run([PYTHON, "-m", "devtools.containerd", "up", "--state-dir", str(state_dir)], check=True, cwd=PROJECT_DIR,
                   capture_output=True, timeout=120)
    daemon = Containerd.from_state_dir(state_dir)
    yield daemon
    subprocess.run([PYTHON, "-m", "devtools.containerd", "down", "--state-dir", str(state_dir)], cwd=PROJECT_DIR,
                   capture_output=True, timeout=120)


def dropin_path(d: Containerd) -> Path:
    return d.workdir / "conf.d" / "99-enflame.toml"


def backup_path(d: Containerd) -> Path:
    return Path(str(d.config_file) + ch.BACKUP_SUFFIX)


def reset(d: Containerd, text: str, extra: dict | None = None) -> bytes:
    """config.toml = text (plus extra files under conf.d), nothing of ours left, and containerd running on exactly that."""
    shutil.rmtree(d.workdir / "conf.d", ignore_errors=True)
    backup_path(d).unlink(missing_ok=True)
    for name, content in (extra or {}).items():
        (d.workdir / "conf.d").mkdir(exist_ok=True)
        (d.workdir / "conf.d" / name).write_text(content)
    data = d.write_config(text)
    d.restart()
    return data


@pytest.fixture
def fresh(containerd):
    """The original config loaded, and one long-running container, as on a busy GCU node."""
    reset(containerd, original_text(containerd))
    workload_id = f"keep-{os.getpid()}-{next(_ids)}"
    pid = containerd.run_container(workload_id, "sleep", "3600")
    yield Workload(workload_id, pid, start_time(pid))
    containerd.remove_container(workload_id)


def host(d: Containerd, **overrides) -> ch.ContainerdHost:
    settings = dict(config_toml=str(d.config_file), dropin=str(dropin_path(d)), address=d.address,
                    restart_command=d.restart_command(), label=NODE, verify_seconds=15)
    settings.update(overrides)
    return ch.ContainerdHost(ch.ContainerdSettings(**settings))


def restarts(d: Containerd) -> int:
    return len(d.restarts())


def untouched(d: Containerd, workload: Workload) -> bool:
    """Same process (PID and start time), still running: the restart did not disturb it."""
    return (d.task_pid(workload.id) == workload.pid and start_time(workload.pid) == workload.started
            and d.task_status(workload.id) == "RUNNING")


def cri_config(d: Containerd) -> dict:
    return cri_client.status(d.address)["config"]


def dump(d: Containerd) -> dict:
    return tomllib.loads(d.config_dump())


def import_line(d: Containerd) -> str:
    return f'imports = ["{dropin_path(d)}"]\n'


# ----------------------------------------------------------------------------- activation and exact restore


def test_activation_restarts_once_keeps_containers_and_restore_is_byte_identical(containerd, fresh):
    d = containerd
    original = d.config_file.read_bytes()
    before = restarts(d)
    result = ch.activate(host(d), d.runc_path)
    assert result["changed"] and result["restarted"] and result["active"] is True
    assert result["version"] == 2 and result["defaultRuntime"] == "enflame"
    assert restarts(d) == before + 1
    assert untouched(d, fresh)
    seen = cri_client.runtimes(d.address)  # the running daemon's word
    assert seen["default"] == "enflame"
    assert seen["runtimes"]["enflame"] == {"type": "io.containerd.runc.v2", "binaryName": d.runc_path}
    # config.toml: one line added, after the last top-level key (where tomlkit adds a key).
    assert d.config_file.read_text() == original.decode().replace("oom_score = 0\n", "oom_score = 0\n" + import_line(d))
    assert ch.unb64(result["original"]) == original and ch.unb64(result["written"]) == d.config_file.read_bytes()
    assert backup_path(d).exists()

    restored = ch.restore(host(d), result)
    assert restored == {"restored": True, "exact": True, "restarted": True,
                        "message": f"{d.config_file} restored byte for byte; {dropin_path(d)} removed"}
    assert d.config_file.read_bytes() == original
    assert not dropin_path(d).exists() and not (d.workdir / "conf.d").exists()  # the directory was ours too
    assert not backup_path(d).exists()
    assert restarts(d) == before + 2
    seen = cri_client.runtimes(d.address)
    assert seen["default"] == "runc" and "enflame" not in seen["runtimes"]
    assert untouched(d, fresh)


def test_second_activation_with_nothing_changed_restarts_nothing_and_still_verifies(containerd, fresh):
    d = containerd
    first = ch.activate(host(d), d.runc_path)
    count, pid = restarts(d), d.daemon_pid()
    again = ch.activate(host(d), d.runc_path)
    assert again["changed"] is False and again["restarted"] is False and again["active"] is True
    assert again["message"] == "unchanged; enflame is the default runtime" and again["reasons"] == []
    assert restarts(d) == count and d.daemon_pid() == pid
    assert again["original"] == first["original"] and again["written"] == first["written"]
    ch.restore(host(d), again)
    assert d.config_file.read_bytes() == ch.unb64(first["original"])


def test_every_other_cri_setting_survives(containerd, fresh):
    """containerd 1.x: an imported plugin section replaces the whole one; the drop-in carries it, so nothing else changes."""
    d = containerd
    before_dump, before_cri = dump(d), cri_config(d)
    result = ch.activate(host(d), d.runc_path)
    after_dump, after_cri = dump(d), cri_config(d)
    # `containerd config dump`: exactly our runtime, the default name and the import differ.
    cri_after, cri_before = after_dump["plugins"][CRI]["containerd"], before_dump["plugins"][CRI]["containerd"]
    assert cri_after["runtimes"].pop("enflame") | {"options": None} == {**cri_after["runtimes"]["runc"], "options": None}
    assert cri_after.pop("default_runtime_name") == "enflame" and cri_before.pop("default_runtime_name") == "runc"
    # (config dump lists the loaded files in no particular order)
    assert sorted(after_dump.pop("imports")) == sorted([*before_dump.pop("imports"), str(dropin_path(d))])
    assert after_dump == before_dump
    assert before_dump["plugins"][CRI]["sandbox_image"] == "gcu-test/pause:3.9"
    # The running daemon agrees (CRI Status config).
    assert after_cri["containerd"]["runtimes"].pop("enflame")["options"] == {"BinaryName": d.runc_path}
    assert after_cri["containerd"].pop("defaultRuntimeName") == "enflame"
    before_cri["containerd"].pop("defaultRuntimeName")
    assert after_cri == before_cri
    ch.restore(host(d), result)


def test_without_a_runtimes_table_the_builtin_runc_is_kept(containerd):
    """A `runtimes` table replaces containerd's built-in one: the drop-in spells out runc, so it stays."""
    d = containerd
    reset(d, original_text(d, runtimes=False))
    before = dump(d)
    result = ch.activate(host(d), d.runc_path)
    after = dump(d)
    runtimes_after = after["plugins"][CRI]["containerd"]["runtimes"]
    runtimes_before = before["plugins"][CRI]["containerd"]["runtimes"]
    assert sorted(runtimes_after) == ["enflame", "runc"] and sorted(runtimes_before) == ["runc"]
    # The only difference besides ours: the built-in runc's option defaults are no longer listed. They are
    # all zero values, which is what containerd's runc shim uses when a runtime has no options.
    assert all(v in ("", 0, False) for v in runtimes_before["runc"]["options"].values())
    runtimes_before["runc"]["options"] = {}
    assert runtimes_after["runc"] == runtimes_before["runc"]
    assert runtimes_after["enflame"]["options"] == {"BinaryName": d.runc_path}
    assert result["active"] is True
    ch.restore(host(d), result)
    assert d.config_file.read_bytes() == original_text(d, runtimes=False).encode()


def test_a_minimal_dropin_would_lose_the_cri_settings_on_containerd_1x(containerd, tmp_path):
    """Why version 2 carries the whole section: checked on the real binary with `config dump`."""
    d = containerd
    minimal = tmp_path / "minimal.toml"
    minimal.write_text(f'version = 2\n[plugins."{CRI}".containerd.runtimes.enflame]\n  runtime_type = "io.containerd.runc.v2"\n')
    config = tmp_path / "config.toml"
    config.write_text(original_text(d).replace("version   = 2\n", f'version   = 2\nimports = ["{minimal}"]\n'))
    merged = tomllib.loads(d.config_dump(config))["plugins"][CRI]
    assert merged["sandbox_image"] != "gcu-test/pause:3.9"  # back to containerd's default
    assert merged["containerd"]["snapshotter"] == "overlayfs"
    assert "runc" not in merged["containerd"]["runtimes"]


def test_edited_file_keeps_the_other_edits(containerd, fresh):
    d = containerd
    result = ch.activate(host(d), d.runc_path)
    other = d.workdir / "other.toml"
    other.write_text("version = 2\n")
    edited = (d.config_file.read_text()
              .replace(import_line(d), f'imports = ["{dropin_path(d)}", "{other}"]\n')
              .replace("max_container_log_line_size = 8192", "max_container_log_line_size = 4096")
              + "# tuned by an admin\n")
    d.config_file.write_text(edited)
    restored = ch.restore(host(d), result)
    assert restored["restored"] and not restored["exact"] and "only the import" in restored["message"]
    assert d.config_file.read_text() == edited.replace(f'"{dropin_path(d)}", ', "")
    assert not dropin_path(d).exists()
    assert cri_config(d)["maxContainerLogSize"] == 4096 and cri_client.runtimes(d.address)["default"] == "runc"
    other.unlink()


def test_edited_file_where_we_created_the_imports_line_loses_just_that_line(containerd, fresh):
    d = containerd
    result = ch.activate(host(d), d.runc_path)
    edited = d.config_file.read_text().replace("oom_score = 0\n", "oom_score = -500\n")
    d.config_file.write_text(edited)
    ch.restore(host(d), result)
    assert d.config_file.read_text() == original_text(d).replace("oom_score = 0\n", "oom_score = -500\n")


def test_changed_cri_section_rewrites_the_dropin_and_restarts(containerd, fresh):
    d = containerd
    first = ch.activate(host(d), d.runc_path)
    d.config_file.write_text(d.config_file.read_text().replace("gcu-test/pause:3.9", "gcu-test/pause:3.10"))
    before = restarts(d)
    drift = ch.inspect(host(d), first)["drift"]
    assert any("CRI section" in line for line in drift), drift
    again = ch.activate(host(d), d.runc_path)
    assert again["changed"] and again["restarted"] and restarts(d) == before + 1
    assert any("CRI section" in reason for reason in again["reasons"]), again["reasons"]
    assert cri_config(d)["sandboxImage"] == "gcu-test/pause:3.10"
    assert cri_client.runtimes(d.address)["default"] == "enflame"
    assert untouched(d, fresh)
    ch.restore(host(d), again)
    assert d.config_file.read_text() == original_text(d).replace("gcu-test/pause:3.9", "gcu-test/pause:3.10")


def test_an_existing_glob_import_is_used_and_an_earlier_cri_section_carried(containerd):
    d = containerd
    glob_import = f'imports = ["{d.workdir}/conf.d/*.toml"]\n'
    text = original_text(d, imports=glob_import)
    earlier = (f'version = 2\n[plugins."{CRI}"]\n  sandbox_image = "gcu-test/pause:from-conf.d"\n'
               f'  [plugins."{CRI}".containerd]\n    snapshotter = "native"\n')
    original = reset(d, text, {"10-site.toml": earlier})
    before = restarts(d)
    result = ch.activate(host(d), d.runc_path)
    assert d.config_file.read_bytes() == original  # already imported: config.toml is not touched
    assert result["importAdded"] is False and result["criSource"] == str(d.workdir / "conf.d" / "10-site.toml")
    assert restarts(d) == before + 1
    assert cri_config(d)["sandboxImage"] == "gcu-test/pause:from-conf.d"
    assert cri_client.runtimes(d.address)["default"] == "enflame"
    ch.restore(host(d), result)
    assert d.config_file.read_bytes() == original and not dropin_path(d).exists()
    assert (d.workdir / "conf.d" / "10-site.toml").read_text() == earlier
    # A file loaded after the drop-in that sets the CRI section would override it: refused, nothing written.
    (d.workdir / "conf.d" / "zz-late.toml").write_text(f'version = 2\n[plugins."{CRI}"]\n  sandbox_image = "late"\n')
    count = restarts(d)
    with pytest.raises(ch.ContainerdConfigError) as caught:
        ch.activate(host(d), d.runc_path)
    assert "zz-late.toml" in str(caught.value) and NODE in str(caught.value)
    assert not dropin_path(d).exists() and not backup_path(d).exists() and restarts(d) == count
    # An unparsable imported file is named with its line.
    (d.workdir / "conf.d" / "zz-late.toml").write_text("version = 2\n[plugins\n")
    with pytest.raises(ch.ContainerdConfigError) as caught:
        ch.activate(host(d), d.runc_path)
    assert "zz-late.toml line 2" in str(caught.value)


# ----------------------------------------------------------------------------- refusals and roll-back


def test_unparsable_config_is_refused_untouched_with_file_and_line(containerd, fresh):
    d = containerd
    text = original_text(d).replace("sandbox_image = ", "sandbox_image == ", 1)
    line = next(i for i, each in enumerate(text.splitlines(), 1) if "sandbox_image ==" in each)
    broken = d.write_config(text)
    mtime = os.stat(d.config_file).st_mtime_ns
    count = restarts(d)
    with pytest.raises(ch.ContainerdConfigError) as caught:
        ch.activate(host(d), d.runc_path)
    message = str(caught.value)
    assert NODE in message and f"{d.config_file} line {line}:" in message and "left untouched" in message
    assert d.config_file.read_bytes() == broken and os.stat(d.config_file).st_mtime_ns == mtime
    assert not (d.workdir / "conf.d").exists() and not backup_path(d).exists()
    assert restarts(d) == count
    d.write_config(original_text(d))


def test_failed_verification_puts_the_previous_files_back_and_names_the_node(containerd, fresh):
    d = containerd
    original = d.config_file.read_bytes()
    # A restart command that restarts nothing: containerd never loads the drop-in.
    with pytest.raises(ch.ActivationError) as caught:
        ch.activate(host(d, restart_command=["true"], verify_seconds=2), d.runc_path)
    assert NODE in str(caught.value) and "put back" in str(caught.value) and "does not know the runtime" in str(caught.value)
    assert d.config_file.read_bytes() == original
    assert not (d.workdir / "conf.d").exists() and not backup_path(d).exists()
    # A restart command that fails.
    with pytest.raises(ch.ActivationError) as caught:
        ch.activate(host(d, restart_command=["sh", "-c", "echo unit not found >&2; exit 5"]), d.runc_path)
    assert NODE in str(caught.value) and "could not restart containerd" in str(caught.value) and "unit not found" in str(caught.value)
    assert d.config_file.read_bytes() == original and not (d.workdir / "conf.d").exists() and not backup_path(d).exists()
    assert cri_client.runtimes(d.address)["default"] == "runc"
    assert untouched(d, fresh)


def test_dropin_directory_that_cannot_be_created_is_refused_untouched(containerd, fresh, tmp_path):
    d = containerd
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    target = blocker / "conf.d" / "99-enflame.toml"
    original, mtime, count = d.config_file.read_bytes(), os.stat(d.config_file).st_mtime_ns, restarts(d)
    with pytest.raises(ch.ContainerdConfigError) as caught:
        ch.activate(host(d, dropin=str(target)), d.runc_path)
    assert NODE in str(caught.value) and str(target) in str(caught.value) and "nothing was written" in str(caught.value)
    assert d.config_file.read_bytes() == original and os.stat(d.config_file).st_mtime_ns == mtime
    assert not backup_path(d).exists() and restarts(d) == count


def test_interrupted_activation_is_completed_by_the_next_one(containerd, fresh):
    """Files written but containerd not restarted (mode none, or a crash in between): the next run restarts once."""
    d = containerd
    count = restarts(d)
    written = ch.activate(host(d), d.runc_path, mode="none")
    assert written["changed"] and written["active"] is None and "only after its next restart" in written["message"]
    assert restarts(d) == count and cri_client.runtimes(d.address)["default"] == "runc"
    completed = ch.activate(host(d), d.runc_path)
    assert completed["changed"] is False and completed["restarted"] and completed["active"] is True
    assert any("had not loaded" in reason for reason in completed["reasons"])
    assert restarts(d) == count + 1 and untouched(d, fresh)
    assert completed["original"] == written["original"]  # from the backup record
    ch.restore(host(d), completed)
    assert d.config_file.read_bytes() == original_text(d).encode()


def test_default_can_be_left_alone(containerd, fresh):
    d = containerd
    result = ch.activate(host(d, set_default=False), d.runc_path)
    seen = cri_client.runtimes(d.address)
    assert result["active"] is True and seen["default"] == "runc" and "enflame" in seen["runtimes"]
    assert "default_runtime_name" not in tomllib.loads(dropin_path(d).read_text())["plugins"][CRI]["containerd"]
    ch.restore(host(d), result)
    assert d.config_file.read_bytes() == original_text(d).encode()


def test_reload_is_not_a_containerd_mode(containerd):
    with pytest.raises(ValueError, match="SIGHUP"):
        ch.activate(host(containerd), containerd.runc_path, mode="reload")


# ----------------------------------------------------------------------------- drift


def test_inspect_reports_drift_and_activation_repairs_it(containerd, fresh):
    d = containerd
    result = ch.activate(host(d), d.runc_path)
    clean = ch.inspect(host(d), result)
    assert clean["drift"] == [] and clean["active"] and clean["upToDate"] and clean["importPresent"]
    # Someone removes our files and restarts containerd.
    d.config_file.write_bytes(ch.unb64(result["original"]))
    dropin_path(d).unlink()
    d.restart()
    seen = ch.inspect(host(d), result)
    assert seen["dropinPresent"] is False and seen["importPresent"] is False and seen["runtimeKnown"] is False
    assert seen["active"] is False and seen["upToDate"] is False
    assert any("is missing" in line for line in seen["drift"]) and any("no longer imports" in line for line in seen["drift"])
    assert any("does not know the runtime" in line for line in seen["drift"])
    repaired = ch.activate(host(d), d.runc_path)
    assert repaired["changed"] and repaired["active"] is True
    assert ch.inspect(host(d), repaired)["drift"] == []
    ch.restore(host(d), repaired)
    assert d.config_file.read_bytes() == original_text(d).encode()


# ----------------------------------------------------------------------------- CLI (pod and toolkit image)


def test_cli_activate_restore_and_refusal(containerd, fresh, tmp_path):
    d = containerd
    # The toolkit image ships the node code alone (/opt/gcu-stack/): run it from such a directory.
    shipped = tmp_path / "opt-gcu-stack"
    for name in NODE_FILES:
        (shipped / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT_DIR / "components" / "node" / name, shipped / name)
    script = shipped / "containerd_host.py"
    common = ["--config-toml", str(d.config_file), "--dropin", str(dropin_path(d)), "--address", d.address,
              "--restart-command", shlex.join(d.restart_command()), "--node", "new-node"]
    done = subprocess.run([PYTHON, str(script), "activate", "--runtime-path", d.runc_path, *common], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    state = json.loads(done.stdout.splitlines()[-1])
    assert state["active"] is True and cri_client.runtimes(d.address)["default"] == "enflame"
    # The provider arriving later finds everything in place and keeps the true original (from the backup).
    later = ch.activate(host(d), d.runc_path)
    assert later["changed"] is False and later["original"] == state["original"]
    inspected = subprocess.run([PYTHON, str(script), "inspect", "--state-json", json.dumps(state), *common], capture_output=True, text=True)
    assert json.loads(inspected.stdout.splitlines()[-1])["drift"] == []
    # Restore from the on-host record alone (no state): what the toolkit image does on its own.
    undone = subprocess.run([PYTHON, str(script), "restore", *common], capture_output=True, text=True)
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert json.loads(undone.stdout.splitlines()[-1])["exact"] is True
    assert d.config_file.read_bytes() == original_text(d).encode() and not dropin_path(d).exists()
    broken = d.write_config("version = 2\n[grpc\n")
    refused = subprocess.run([PYTHON, str(script), "activate", "--runtime-path", "/x", *common], capture_output=True, text=True)
    error = json.loads(refused.stdout.splitlines()[-1])["error"]
    assert refused.returncode == 1 and "new-node" in error and f"{d.config_file} line 2" in error
    assert d.config_file.read_bytes() == broken
    d.write_config(original_text(d))


# ----------------------------------------------------------------------------- the CRI client against the real daemon


def test_cri_client_against_the_real_daemon(containerd):
    d = containerd
    status = cri_client.status(d.address)
    assert status["conditions"]["RuntimeReady"]["status"] is True
    assert status["conditions"]["NetworkReady"]["status"] is False  # no CNI config here: reported, with a reason
    assert status["conditions"]["NetworkReady"]["reason"]
    assert {"config", "golang", "cniconfig"} <= set(status["info"])
    assert status["config"]["containerd"]["snapshotter"] == "native"
    version = cri_client.version(d.address)
    assert version["version"].startswith("1.6.20") and version["version"] in d.ctr("version").stdout
    plugins = {(p["type"], p["id"]): p for p in cri_client.plugins(d.address)}
    assert plugins[("io.containerd.grpc.v1", "cri")]["error"] is None
    assert plugins[("io.containerd.snapshotter.v1", "devmapper")]["error"]  # init errors come through
    missing = str(d.workdir / "no.sock")
    with pytest.raises(cri_client.CriError, match=f"RuntimeService/Status: cannot connect to {missing}"):
        cri_client.status(missing)


def test_cri_client_names_the_socket_and_the_call_when_a_daemon_does_not_serve_cri(tmp_path):
    """A gRPC server without the CRI service (e.g. containerd whose CRI plugin failed to load): the call's status comes through."""
    socket = str(tmp_path / "no-cri.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        with pytest.raises(cri_client.CriError) as caught:
            cri_client.runtimes(socket)
        assert str(caught.value).startswith(f"/runtime.v1.RuntimeService/Status: {socket} answered UNIMPLEMENTED")
        with pytest.raises(cri_client.CriError, match="Introspection/Plugins: .* answered UNIMPLEMENTED"):
            cri_client.plugins(socket)
        assert cri_client.explain(socket) is None  # nothing known: no reason is made up
    finally:
        server.stop(None)


# ----------------------------------------------------------------------------- file level: defaults, version 3, host root


def test_missing_config_toml_takes_the_daemons_defaults(containerd, tmp_path):
    d = containerd
    config = tmp_path / "etc" / "containerd" / "config.toml"
    dropin = tmp_path / "etc" / "containerd" / "conf.d" / "99-enflame.toml"
    settings = dict(config_toml=str(config), dropin=str(dropin), restart_command=["false"])
    result = ch.activate(host(d, **settings), "/usr/bin/enflame-runtime", mode="none")
    # containerd 1.6.20 answered its version: config format 2.
    assert result["version"] == 2 and result["original"] is None
    assert config.read_text() == f'version = 2\nimports = ["{dropin}"]\n'
    carried = tomllib.loads(dropin.read_text())["plugins"][CRI]["containerd"]
    assert carried["runtimes"] == {"runc": {"runtime_type": "io.containerd.runc.v2"},
                                   "enflame": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/enflame-runtime"}}}
    assert result["createdDirs"] == [str(tmp_path / "etc"), str(tmp_path / "etc" / "containerd"), str(dropin.parent)]
    ch.restore(host(d, **settings), result, mode="none")
    assert not (tmp_path / "etc").exists()
    # Without a running containerd, the format is unknown unless given.
    offline = dict(settings, address=str(tmp_path / "none.sock"))
    with pytest.raises(ch.ContainerdConfigError, match="does not say which"):
        ch.activate(host(d, **offline), "/x", mode="none")
    forced = ch.activate(host(d, **offline, config_version=3), "/x", mode="none")
    assert forced["version"] == 3 and V3 in tomllib.loads(dropin.read_text())["plugins"]
    ch.restore(host(d, **offline), forced, mode="none")
    assert not (tmp_path / "etc").exists()


def test_new_files_take_config_tomls_mode_and_a_settings_free_file_gets_version_and_import(containerd, tmp_path):
    """The drop-in and the backup copy config.toml's settings (registry credentials too): same mode as config.toml."""
    config, dropin = tmp_path / "config.toml", tmp_path / "conf.d" / "99-enflame.toml"
    text = "# settings come later\n"
    config.write_text(text)
    config.chmod(0o600)
    h = host(containerd, config_toml=str(config), dropin=str(dropin), restart_command=["false"])
    result = ch.activate(h, "/x", mode="none")  # no settings at all: containerd's defaults, version from the daemon
    assert config.read_text() == text + f'version = 2\nimports = ["{dropin}"]\n'
    assert dropin.stat().st_mode & 0o777 == 0o600 and Path(str(config) + ch.BACKUP_SUFFIX).stat().st_mode & 0o777 == 0o600
    assert config.stat().st_mode & 0o777 == 0o600
    ch.restore(h, result, mode="none")
    assert config.read_text() == text and config.stat().st_mode & 0o777 == 0o600


V3_CONFIG = (
    "version = 3\n"
    "root = '/var/lib/containerd'\n"
    "\n"
    f'[plugins."{V3}"]\n'
    "  enable_selinux = false\n"
    f'  [plugins."{V3}".containerd]\n'
    '    default_runtime_name = "runc"\n'
    f'    [plugins."{V3}".containerd.runtimes.runc]\n'
    '      runtime_type = "io.containerd.runc.v2"\n'
    '[plugins."io.containerd.cri.v1.images"]\n'
    '  snapshotter = "overlayfs"\n'
)


# version 4 (containerd >= 2.2's `config default`): the servers' settings moved into plugins, the CRI's did not
V4_CONFIG = V3_CONFIG.replace("version = 3\n", "version = 4\n") + (
    "[plugins.'io.containerd.server.v1.grpc']\n"
    "  address = '/run/containerd/containerd.sock'\n"
)


def containerd2_reads(config: Path) -> dict:
    """The configuration containerd 2 itself builds from config.toml and its imports (`containerd config dump`)."""
    out = subprocess.run([str(containerd2_bin_dir() / "containerd"), "--config", str(config), "config", "dump"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return tomllib.loads(out)


@pytest.mark.parametrize("version, text", [(3, V3_CONFIG), (4, V4_CONFIG)])
@pytest.mark.parametrize("set_default", [True, False])
def test_versions_3_and_4_get_a_minimal_dropin_containerd_2_merges_and_an_exact_restore(containerd, tmp_path, set_default,
                                                                                        version, text):
    """containerd 2.x merges imported sections: only the runtime goes into the drop-in; containerd 2.4 reads it so."""
    config, dropin = tmp_path / "config.toml", tmp_path / "conf.d" / "99-enflame.toml"
    config.write_text(text)
    h = host(containerd, config_toml=str(config), dropin=str(dropin), restart_command=["false"], set_default=set_default)
    result = ch.activate(h, "/usr/bin/enflame-runtime", mode="none")
    assert result["version"] == version
    enflame = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/enflame-runtime"}}
    containerd_section = {"runtimes": {"enflame": enflame}}
    if set_default:
        containerd_section["default_runtime_name"] = "enflame"
    assert tomllib.loads(dropin.read_text()) == {"version": version, "plugins": {V3: {"containerd": containerd_section}}}
    assert tomllib.loads(config.read_text()) == {**tomllib.loads(text), "imports": [str(dropin)]}
    assert config.read_text() == text.replace("root = '/var/lib/containerd'\n", f"root = '/var/lib/containerd'\nimports = [\"{dropin}\"]\n")
    # What containerd 2 makes of it: the runtime added, every other CRI setting as config.toml has it.
    merged = containerd2_reads(config)["plugins"]
    runtimes = merged[V3]["containerd"]["runtimes"]
    assert runtimes["enflame"]["runtime_type"] == enflame["runtime_type"]
    assert runtimes["enflame"]["options"]["BinaryName"] == "/usr/bin/enflame-runtime" and "runc" in runtimes
    assert merged[V3]["containerd"]["default_runtime_name"] == ("enflame" if set_default else "runc")
    assert merged["io.containerd.cri.v1.images"]["snapshotter"] == "overlayfs"
    assert merged[V3]["enable_selinux"] is False
    again = ch.activate(h, "/usr/bin/enflame-runtime", mode="none")
    assert again["changed"] is False
    ch.restore(h, result, mode="none")
    assert config.read_text() == text and not dropin.exists()
    assert "enflame" not in containerd2_reads(config)["plugins"][V3]["containerd"]["runtimes"]


def test_version_3_refuses_only_later_files_that_set_the_same_keys(containerd, tmp_path):
    (tmp_path / "conf.d").mkdir()
    config, dropin = tmp_path / "config.toml", tmp_path / "conf.d" / "50-enflame.toml"
    config.write_text(V3_CONFIG.replace("version = 3\n", f'version = 3\nimports = ["{tmp_path}/conf.d/*.toml"]\n'))
    h = host(containerd, config_toml=str(config), dropin=str(dropin), restart_command=["false"])
    # Sections merge on 2.x: a later file with other CRI settings is fine...
    (tmp_path / "conf.d" / "90-site.toml").write_text(f'version = 3\n[plugins."{V3}"]\n  enable_selinux = true\n')
    result = ch.activate(h, "/x", mode="none")
    assert result["importAdded"] is False and config.read_text().startswith("version = 3\nimports = [")
    ch.restore(h, result, mode="none")
    # ...one that sets the default runtime would undo ours.
    (tmp_path / "conf.d" / "90-site.toml").write_text(f'version = 3\n[plugins."{V3}".containerd]\n  default_runtime_name = "crun"\n')
    with pytest.raises(ch.ContainerdConfigError, match="90-site.toml is loaded after"):
        ch.activate(h, "/x", mode="none")
    assert not dropin.exists()


@pytest.mark.parametrize("text, fragment", [
    ("version = 1\n", "config version 1"),
    ('root = "/var/lib/containerd"\n', "has no `version`"),
    ("version = 5\n", "`version = 5`"),
    ('version = 2\ndisabled_plugins = ["cri"]\n', "disables containerd's CRI plugin"),
    ('version = 2\nimports = ["/nonexistent/x.toml"]\n', "which does not exist"),
])
def test_unsupported_configs_are_refused_untouched(containerd, tmp_path, text, fragment):
    config = tmp_path / "config.toml"
    config.write_text(text)
    with pytest.raises(ch.ContainerdConfigError) as caught:
        ch.activate(host(containerd, config_toml=str(config), dropin=str(tmp_path / "d" / "99.toml")), "/x", mode="none")
    assert fragment in str(caught.value) and NODE in str(caught.value) and str(config) in str(caught.value)
    assert config.read_text() == text and not (tmp_path / "d").exists()


def test_host_root_reads_under_the_mount_and_writes_host_paths(containerd, tmp_path):
    """In a pod the host's / is under /host: files are reached there, but config.toml must name host paths."""
    root = tmp_path / "host"
    (root / "etc" / "containerd").mkdir(parents=True)
    text = f'version = 2\n[plugins."{CRI}"]\n  sandbox_image = "registry.local/pause:3.9"\n'
    (root / "etc" / "containerd" / "config.toml").write_text(text)
    settings = ch.ContainerdSettings(host_root=str(root), label=NODE, restart_command=["false"])
    h = ch.ContainerdHost(settings)
    result = ch.activate(h, "/usr/bin/enflame-runtime", mode="none")
    assert (root / "etc" / "containerd" / "config.toml").read_text() == text.replace(
        "version = 2\n", 'version = 2\nimports = ["/etc/containerd/conf.d/99-enflame.toml"]\n')
    carried = tomllib.loads((root / "etc/containerd/conf.d/99-enflame.toml").read_text())["plugins"][CRI]
    assert carried["sandbox_image"] == "registry.local/pause:3.9"
    assert result["createdDirs"] == ["/etc/containerd/conf.d"]
    ch.restore(h, result, mode="none")
    assert (root / "etc" / "containerd" / "config.toml").read_text() == text
    assert sorted(os.listdir(root / "etc" / "containerd")) == ["config.toml"]
    assert ch.host_directories(ch.ContainerdSettings()) == ["/etc/containerd", "/run/containerd"]


# ----------------------------------------------------------------------------- the text edits and the TOML writer


# (config.toml, what removing the import gives back where that is not the same text: tomlkit keeps the comma it put
# after the element before ours in a multi-line array, drops a trailing comma in a one-line one, and ends the file
# with a newline)
EDIT_CASES = [
    ('version = 2\nroot = "/r"\n[grpc]\naddress = "x"\n', None),
    ("# head\n\nversion = 2\r\n[grpc]\r\n", None),
    ("version = 2 # c\nimports = []\n", None),
    ('version = 2\nimports = ["/a.toml"] # c\n[x]\n', None),
    ('version = 2\nimports = [\n  "/a.toml",\n  "/b.toml"\n]\n', 'version = 2\nimports = [\n  "/a.toml",\n  "/b.toml",\n]\n'),
    ('version = 2\nimports = [\n  "/a.toml",\n  "/b.toml"  # last\n]\n', 'version = 2\nimports = [\n  "/a.toml",\n  "/b.toml",  # last\n]\n'),
    ('version = 2\nimports = [\n  "/a.toml",\n  "/b.toml",  # trailing comma\n]\n', None),
    ('version = 2\r\nimports = [\r\n  "/a.toml",\r\n  "/b.toml"\r\n]\r\n', 'version = 2\r\nimports = [\r\n  "/a.toml",\r\n  "/b.toml",\r\n]\r\n'),
    ('version = 2\nimports = ["/a.toml",\n           "/b.toml"]\n', None),
    ('version = 2\nimports = ["/a.toml",]\n', 'version = 2\nimports = ["/a.toml"]\n'),
    ('[grpc]\naddress="x"\nversion=3\n', None),
    ('root = "/r"\nversion = 2', 'root = "/r"\nversion = 2\n'),
    ("version = 2\nimports = ['/a.toml', \"\"\"/b\"\"\"]\nx = {a = [1, 2], b = \"]\"}\n", None),
]


@pytest.mark.parametrize("text, undone_text", EDIT_CASES)
def test_import_edit_is_minimal_and_undone(text, undone_text):
    entry = "/etc/containerd/conf.d/99-enflame.toml"
    edited = ch.add_import_text(text, entry)
    before = tomllib.loads(text)
    assert tomllib.loads(edited) == {**before, "imports": [*before.get("imports", []), entry]}
    changed = [line for line in difflib.ndiff(text.splitlines(), edited.splitlines()) if line[:1] in "+-"]
    assert len(changed) <= 3, changed  # a local edit, not a rewrite
    bare = lambda t: t.replace("\r\n", "").count("\n")  # noqa: E731
    assert "\r\n" not in text or bare(edited) == bare(text)  # lines added to a CRLF file end in CRLF
    undone, _ = ch.remove_import_text(edited, entry, drop_key="imports" not in before)
    assert undone == (undone_text or text)
    assert tomllib.loads(undone) == before


def test_toml_writer_round_trips_what_tomllib_reads():
    import datetime

    document = {
        "version": 2,
        "plugins": {CRI: {
            "sandbox_image": 'quote " backslash \\ tab \t é', "ratio": 0.5, "big": 10**12, "neg": -3, "on": True,
            "list": [1, 2], "nested": [[1], ["a"]], "inline": [{"a": 1}], "when": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
            "day": datetime.date(2024, 1, 2), "empty": {},
            "registry": {"mirrors": {"docker.io": {"endpoint": ["https://mirror"]}}, "configs": {"r.local:5000": {"tls": {"insecure_skip_verify": True}}}},
            "tables": [{"name": "x"}, {"name": "y", "sub": {"k": "v"}}],
        }},
    }
    assert tomllib.loads(ch.dumps(document)) == document


def test_dropin_is_laid_out_as_containerd_writes_it():
    """The drop-in's bytes are what gcu-stack always wrote (a change would rewrite it and restart containerd on
    every node once), the same with every tomlkit from 0.11 (Debian bookworm) on."""
    document = {"version": 2, "plugins": {CRI: {
        "sandbox_image": "registry.local/pause:3.9", "containerd": {
            "snapshotter": "overlayfs", "default_runtime_name": "enflame", "runtimes": {
                "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}},
                "enflame": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/enflame-runtime"}}}},
        "registry": {"mirrors": {"registry.local": {"endpoint": ["http://127.0.0.1:5000"]}}}}}}
    assert ch.dumps(document) == (
        "version = 2\n"
        "\n"
        "[plugins]\n"
        "\n"
        f'  [plugins."{CRI}"]\n'
        '    sandbox_image = "registry.local/pause:3.9"\n'
        "\n"
        f'    [plugins."{CRI}".containerd]\n'
        '      snapshotter = "overlayfs"\n'
        '      default_runtime_name = "enflame"\n'
        "\n"
        f'      [plugins."{CRI}".containerd.runtimes]\n'
        "\n"
        f'        [plugins."{CRI}".containerd.runtimes.runc]\n'
        '          runtime_type = "io.containerd.runc.v2"\n'
        "\n"
        f'          [plugins."{CRI}".containerd.runtimes.runc.options]\n'
        "            SystemdCgroup = true\n"
        "\n"
        f'        [plugins."{CRI}".containerd.runtimes.enflame]\n'
        '          runtime_type = "io.containerd.runc.v2"\n'
        "\n"
        f'          [plugins."{CRI}".containerd.runtimes.enflame.options]\n'
        '            BinaryName = "/usr/bin/enflame-runtime"\n'
        "\n"
        f'    [plugins."{CRI}".registry]\n'
        "\n"
        f'      [plugins."{CRI}".registry.mirrors]\n'
        "\n"
        f'        [plugins."{CRI}".registry.mirrors."registry.local"]\n'
        '          endpoint = ["http://127.0.0.1:5000"]\n'
    )
