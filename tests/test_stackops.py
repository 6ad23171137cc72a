"""stackops: what proves a stack's lock stale, clearing it, and the pending operations a killed command leaves,
with the real Pulumi CLI on a real file backend (a small project whose resource takes its time), and real
processes killed outright as a CI runner's timeout kills them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine import pulumi_env
from realservers import PROJECT_DIR

from stackops import holders, locks, pending, recover

SLOW_PROGRAM = '''
import os, time
import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider

class Slow(ResourceProvider):
    def create(self, props):
        time.sleep(float(props["seconds"]))
        return CreateResult("slow", props)

class SlowResource(Resource):
    def __init__(self, name, seconds):
        super().__init__(Slow(), name, {"seconds": seconds})

SlowResource("slow", os.environ.get("SLOW_SECONDS", "0"))
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project of one slow dynamic resource, its file backend and the toolchain's CLI."""
    root = tmp_path_factory.mktemp("stackops")
    project = root / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: stackops-probe\nruntime:\n  name: python\n  options:\n    virtualenv: {PROJECT_DIR / '.venv'}\n"
    )
    (project / "__main__.py").write_text(SLOW_PROGRAM)
    (root / "home").mkdir()
    (root / "backend").mkdir()
    env = {**os.environ, **pulumi_env(root / "home", root / "backend")}
    subprocess.run(["pulumi", "stack", "init", "s"], cwd=project, env=env, check=True, capture_output=True)
    return project, root, env


def backend_url(root: Path) -> str:
    return f"file://{root / 'backend'}"


def start_up(project: Path, root: Path, env: dict, seconds: float) -> subprocess.Popen:
    """`python -m stackops run -- pulumi up` in its own process group, as scripts/gcu-stack runs it."""
    return subprocess.Popen(
        [sys.executable, "-m", "stackops", "run", "--backend", backend_url(root), "--stack", "s", "--",
         "pulumi", "up", "--yes", "--skip-preview", "--stack", "s"],
        cwd=project, env={**env, "SLOW_SECONDS": str(seconds), "PYTHONPATH": str(PROJECT_DIR)},
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def the_lock(root: Path) -> locks.BackendLock:
    (lock,) = locks.inspect(root / "backend", "stackops-probe", "s")
    return lock


def test_a_lock_left_by_a_command_killed_outright_is_proved_stale_and_cleared_with_what_it_left_pending(project):
    project_dir, root, env = project
    up = start_up(project_dir, root, env, 600)
    try:
        lock = wait_for(lambda: locks.backend_locks(root / "backend", "stackops-probe", "s"), 60, "pulumi's lock")[0]
        # Held by a running command: reported, never cleared.
        wait_for(lambda: the_lock(root).holder is not None, 10, "the holder record")
        assert the_lock(root).verdict == "running"
        result = recover(project_dir, "s", backend_url(root), root / "state", env=env)
        assert not result.ok and "is being changed right now by `pulumi up --yes`" in result.blocked[0]
        assert lock.path.exists()
        # Wait until the slow resource's create is under way (its pending operation), then kill everything at once.
        # Not any "creating" in the state: the stack resource's own create is one too, done a moment later.
        wait_for(lambda: creating_slow(root), 60, "the slow resource's create to start")
    finally:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
    # Every process of the group is dead once init has reaped what the killed wrapper can no longer wait for.
    stale = wait_for(lambda: (lambda lock: lock if lock.verdict == "gone" else None)(the_lock(root)), 20, "the holder to be gone")
    assert stale.verdict == "gone" and (f"no process {stale.pid} runs on this machine any more" in stale.why
                                        or f"process {stale.pid} has exited" in stale.why), stale.why
    # Killing the CLI's group did not kill its plugins (Pulumi gives them process groups of their own): the dynamic
    # provider still sleeps in its create, and would go on acting. They are stopped before the lock is cleared.
    left = holders.leftovers(stale.holder)
    assert any("python" in command for _, command in left), left
    result = recover(project_dir, "s", backend_url(root), root / "state", env=env)
    assert result.ok, result.blocked
    said = "\n".join(result.cleared)
    # The kill may also catch fileblob writing the state's metadata file in place (see the next test): then one more
    # entry says so. What must hold is each entry's presence, and that the plugins stop before the lock goes.
    stopped = entry(result.cleared, "process(es) the killed command left running")
    unlocked = entry(result.cleared, "removed the lock left by `pulumi up --yes`")
    dropped = entry(result.cleared, "interrupted while creating")
    assert "python" in result.cleared[stopped] and stopped < unlocked, said
    assert "backup:" in result.cleared[dropped], said
    assert len(result.cleared) == 3 + any("was left unreadable" in line for line in result.cleared), said
    assert holders.leftovers(stale.holder) == []
    assert locks.backend_locks(root / "backend", "stackops-probe", "s") == []
    assert pending.pending_operations(pending.export("s", project_dir, env)) == []
    assert list(holders.holders_dir(root / "backend").glob("*.json")) == []
    # And the next up simply runs: no lock, no warning about pending operations.
    again = subprocess.run(["pulumi", "up", "--yes", "--skip-preview", "--stack", "s"], cwd=project_dir,
                           env={**env, "SLOW_SECONDS": "0"}, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "pending operations" not in again.stdout + again.stderr


def entry(cleared: list[str], phrase: str) -> int:
    """The index of the one cleared entry that says `phrase`."""
    found = [index for index, line in enumerate(cleared) if phrase in line]
    assert len(found) == 1, (phrase, cleared)
    return found[0]


def up_state(root: Path) -> str:
    path = root / "backend" / ".pulumi" / "stacks" / "stackops-probe" / "s.json"
    return path.read_text() if path.exists() else ""


def creating_slow(root: Path) -> bool:
    """The state the running up last wrote holds the slow resource's pending create."""
    try:
        latest = json.loads(up_state(root))["checkpoint"]["latest"] or {}
    except (ValueError, KeyError, TypeError):
        return False   # not written yet, or caught mid-write
    return any(op.get("type") == "creating" and op["resource"]["urn"].endswith("::slow")
               for op in latest.get("pending_operations") or [])


def test_a_metadata_file_a_killed_command_left_empty_is_set_aside_and_the_state_reads_again(project):
    """fileblob writes `<object>.attrs` in place: a kill between its create and its write leaves it empty, and the
    real CLI then cannot read the stack at all (seen in CI after the kill above)."""
    project_dir, root, env = project
    done = subprocess.run(["pulumi", "up", "--yes", "--skip-preview", "--stack", "s"], cwd=project_dir,
                          env={**env, "SLOW_SECONDS": "0"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    before = pending.export("s", project_dir, env)
    sidecar = root / "backend" / ".pulumi" / "stacks" / "stackops-probe" / "s.json.attrs"
    assert sidecar.exists()
    sidecar.write_bytes(b"")
    broken = subprocess.run(["pulumi", "stack", "export", "--stack", "s"], cwd=project_dir, env=env,
                            capture_output=True, text=True)
    assert broken.returncode != 0 and "failed to load checkpoint: EOF" in broken.stderr, broken.stderr
    result = recover(project_dir, "s", backend_url(root), root / "state", env=env)
    assert result.ok and len(result.cleared) == 1, result
    assert f"metadata file {sidecar} was left unreadable" in result.cleared[0], result.cleared
    assert not sidecar.exists() and list((root / "state" / "state-backups").glob("*s.json.attrs"))
    # The state is what it was, and the next command rewrites the sidecar.
    assert pending.export("s", project_dir, env)["deployment"]["resources"] == before["deployment"]["resources"]
    again = subprocess.run(["pulumi", "up", "--yes", "--skip-preview", "--stack", "s"], cwd=project_dir,
                           env={**env, "SLOW_SECONDS": "0"}, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(sidecar.read_bytes()) and recover(project_dir, "s", backend_url(root), root / "state", env=env).cleared == []


def test_a_lock_without_a_holder_record_or_from_another_host_is_reported_not_cleared(project, tmp_path):
    project_dir, root, env = project
    directory = locks.lock_dirs(root / "backend", "stackops-probe", "s")[0]
    directory.mkdir(parents=True, exist_ok=True)
    lock_file = directory / "plain-pulumi.json"
    # A lock as a plain `pulumi up` (not started by gcu-stack) writes it, by a pid that does not run.
    lock_file.write_text(json.dumps({"pid": 4_000_000, "username": "ci", "hostname": holders.Host.here().hostname,
                                     "timestamp": "2026-11-24T10:00:00Z"}))
    try:
        result = recover(project_dir, "s", backend_url(root), root / "state", env=env)
        assert not result.ok and "gcu-stack did not start it" in result.blocked[0]
        assert f"rm {lock_file}" in result.blocked[0] and lock_file.exists()
        # Another host's, with a holder record: its process cannot be asked, so it is not cleared either.
        other = dataclasses.replace(holders.write(root / "backend", os.getpid(), "s", ["pulumi", "up"]), hostname="ci-runner-7")
        lock_file.write_text(json.dumps({"pid": os.getpid(), "username": "ci", "hostname": "ci-runner-7",
                                         "timestamp": "2026-11-24T10:00:00Z"}))
        holders.record_path(root / "backend", "ci-runner-7", os.getpid()).write_text(json.dumps(dataclasses.asdict(other)))
        result = recover(project_dir, "s", backend_url(root), root / "state", env=env)
        assert not result.ok and "it runs on another host, ci-runner-7" in result.blocked[0]
    finally:
        lock_file.unlink(missing_ok=True)
        for record in holders.holders_dir(root / "backend").glob("*.json"):
            record.unlink()


def test_verdicts_compare_host_boot_pid_namespace_pid_and_start_time(tmp_path):
    here = holders.Host.here()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = holders.write(tmp_path, child.pid, "s", ["pulumi", "up"])
        assert holders.verdict(record, here)[0] == "running"
        # The same pid with another start time: the pid was reused by another program.
        assert holders.verdict(dataclasses.replace(record, start_ticks=record.start_ticks - 1), here)[0] == "gone"
        # Rebooted since (same machine id, another boot id): gone. Another machine of the same name: elsewhere.
        rebooted = dataclasses.replace(record, boot_id="00000000-0000-0000-0000-000000000000")
        assert holders.verdict(rebooted, here)[0] == ("gone" if here.machine_id else "elsewhere")
        clone = dataclasses.replace(rebooted, machine_id="another-machine")
        assert holders.verdict(clone, here)[0] == "elsewhere"
        assert holders.verdict(dataclasses.replace(record, pid_namespace="pid:[1]"), here)[0] == "elsewhere"
        assert holders.verdict(None, here)[0] == "unknown"
    finally:
        child.kill()
        child.wait()
    assert holders.verdict(record, here)[0] == "gone"


def test_run_passes_sigterm_on_and_removes_its_record(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "stackops", "run", "--state-dir", str(tmp_path), "--stack", "s", "--", "sleep", "60"],
        cwd=PROJECT_DIR, env={**os.environ, "PYTHONPATH": str(PROJECT_DIR), "PULUMI_BACKEND_URL": ""},
    )
    wait_for(lambda: list(holders.holders_dir(tmp_path).glob("*.json")), 20, "the holder record")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 128 + signal.SIGTERM
    assert list(holders.holders_dir(tmp_path).glob("*.json")) == []


def test_without_the_pulumi_cli_on_path_the_commands_say_so(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # no pulumi there
    done = subprocess.run([sys.executable, "-m", "stackops", "cluster-check", "--stack", "dev", "--project-dir", str(PROJECT_DIR)],
                          cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no `pulumi` CLI on PATH" in done.stderr and "Traceback" not in done.stderr, done
