"""devtools/sweep.py against real servers: what a killed etcd and a killed dockerd (with a container running) leave
on the machine is removed by the next sweep, and what live ones hold is left alone. (Real nodes: test_realnode.py.)
Never skipped."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools import mounts_under, overlay_mount_error, pid_alive, pid_cmdline
from devtools.dockerd import BASE_IMAGE, Dockerd
from devtools.localcluster import LocalCluster
from devtools.sweep import SERVERS, sweep_etcd_tmpfs, sweep_servers

pytestmark = pytest.mark.timeout(600)


def _mounts_under(path: Path) -> list[str]:
    return mounts_under([path])


def _processes_naming(text: str) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and text in "\0".join(pid_cmdline(int(p)))]


def _kill_outright(pids) -> None:
    """SIGKILL, as the end of a session does: no process gets to clean up."""
    pids = list(pids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_killed_clusters_etcd_data_is_removed_from_dev_shm_and_a_live_ones_is_kept(tmp_path):
    with LocalCluster(tmp_path / "live", nodes=[], audit=False) as live:
        killed = LocalCluster(tmp_path / "killed", nodes=[], audit=False).start()
        data = killed.etcd_data_dir
        assert str(data).startswith("/dev/shm/gcu-etcd-") and data.is_dir()
        _kill_outright(c.pid for c in killed.components.values())

        assert str(data) not in sweep_etcd_tmpfs(min_age=3600, log=lambda m: None)   # too young to be sure: left
        _age(data)   # (rather than min_age=0, which could take another test worker's cluster that is starting)
        assert str(data) in sweep_etcd_tmpfs(min_age=3600, log=lambda m: None)
        assert not data.exists()
        assert live.etcd_data_dir.is_dir()
        assert live.api.get("/version")["gitVersion"]                      # its etcd still serves


def test_the_overlay_probe_mounts_in_a_namespace_of_its_own_and_leaves_nothing(tmp_path):
    assert overlay_mount_error(tmp_path / "probe") is None
    assert list((tmp_path / "probe").iterdir()) == [] and _mounts_under(tmp_path) == []
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(OSError):   # a workdir that cannot be made says so
        overlay_mount_error(tmp_path / "file" / "probe")


def test_a_killed_dockerds_mounts_processes_and_short_directory_go_and_a_live_ones_stay(tmp_path):
    with Dockerd(tmp_path / "live") as live:
        killed = Dockerd(tmp_path / "killed").start()
        assert killed.storage_driver == "overlay2", "overlays mount here: the container's root is one more mount to sweep"
        killed.ensure_base_image()
        killed.docker("run", "-d", "--network", "none", BASE_IMAGE, "sleep", "600")
        short = killed.short_dir
        record = [p for p in SERVERS.glob("dockerd-*.json") if str(killed.workdir) in p.read_text()]
        assert len(record) == 1, "the dockerd recorded what it owns"
        # everything of it dies at once: dockerd, its containerd, the shim, the container
        victims = {killed.pid, *_processes_naming(str(short))}
        victims |= {int(p) for p in os.listdir("/proc") if p.isdigit() and _in_subtree(int(p), victims)}
        _kill_outright(victims)
        left = _mounts_under(killed.data_root) + _mounts_under(short)
        assert left, "a killed dockerd leaves mounts (its data root's own bind mount at least)"
        live_mounts = _mounts_under(live.data_root) + _mounts_under(live.short_dir)

        assert not [r for r in sweep_servers(min_age=3600, log=lambda m: None) if str(killed.workdir) in r]
        _age(record[0])   # recorded long ago, as a killed session's server was
        removed = sweep_servers(min_age=3600, log=lambda m: None)
        assert [r for r in removed if str(killed.workdir) in r], removed
        assert _mounts_under(killed.data_root) == _mounts_under(short) == []
        assert not short.exists() and not record[0].exists()
        assert not _processes_naming(str(short))
        # the live one: untouched and answering
        assert _mounts_under(live.data_root) + _mounts_under(live.short_dir) == live_mounts
        assert live.docker("version", "--format", "{{.Server.Version}}").stdout.strip()


def _age(path: Path, seconds: float = 7200) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _in_subtree(pid: int, roots: set) -> bool:
    seen = set()
    while pid > 1 and pid not in seen:
        if pid in roots:
            return True
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return False
    return False


def test_a_server_spawned_by_a_killed_busy_process_dies_with_it(tmp_path):
    """spawn() from the main thread of a process with other threads at work (as a test running `pulumi up` in a thread
    is): the server starts, runs its own program, and gets SIGKILL when that process is killed."""
    marker = f"600.{os.getpid()}{time.monotonic_ns() % 10**6}"   # sleep's argument, unique to this test
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, threading, time\n"
        "from pathlib import Path\n"
        "from devtools import spawn\n"
        "for _ in range(4):\n"
        "    threading.Thread(target=lambda: [bytearray(4096) for _ in iter(int, 1)], daemon=True).start()\n"
        f"procs = [spawn(['sleep', '{marker}'], Path(sys.argv[1]) / f'{{i}}.log', detach=False) for i in range(20)]\n"
        "print(' '.join(str(p.pid) for p in procs), flush=True)\n"
        "time.sleep(600)\n")
    repo = Path(__file__).resolve().parents[1]
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 20
        deadline = time.monotonic() + 10
        while any(pid_cmdline(p)[:1] != ["sleep"] for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(pid_cmdline(p)[:1] == ["sleep"] for p in pids), "a spawned server did not exec its program"
    finally:
        _kill_outright([parent.pid])
        parent.wait()
    deadline = time.monotonic() + 10
    while _processes_naming(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_naming(marker) == []


def test_the_last_node_removes_container_cgroups_left_empty_under_k8s_io_and_never_one_with_a_process():
    from devtools.realnode import _cgroup_roots, _rmdir_cgroup_tree

    hierarchy = next(r for r in _cgroup_roots() if r.name != "cpuset")   # (cpuset takes a process only once set up)
    parent = hierarchy / f"gcu-test-cgroups-{os.getpid()}"
    empty, busy = parent / "empty-container" / "child", parent / "running-container"
    empty.mkdir(parents=True)
    busy.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (busy / "cgroup.procs").write_text(str(sleeper.pid))
        assert _rmdir_cgroup_tree(parent) is False
        assert not (parent / "empty-container").exists() and busy.is_dir() and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
    assert _rmdir_cgroup_tree(parent) is True and not parent.exists()


def test_a_sweep_of_real_nodes_waits_while_another_process_holds_the_sweep_lock(tmp_path):
    """A test that kills a node to sweep it holds the lock in between: `python -m devtools.sweep` from a process
    with another GCU_CACHE_DIR (scripts/gcu-stack under test_setup_path, which sees no owner record) waits for it."""
    from devtools.realnode import _SWEEP_LOCK, sweep_lock

    env = {**os.environ, "GCU_CACHE_DIR": str(tmp_path / "cache")}
    project = Path(__file__).resolve().parent.parent
    with sweep_lock():
        sweep = subprocess.Popen([sys.executable, "-m", "devtools.sweep"], cwd=project, env=env,
                                 stderr=subprocess.PIPE, text=True)
        try:
            # the kernel's own account: the sweep's process is blocked on the lock file (a "->" line of /proc/locks)
            inode = f":{os.stat(_SWEEP_LOCK).st_ino} "
            deadline = time.monotonic() + 60
            while not any(line.split()[1] == "->" and line.split()[5] == str(sweep.pid) and inode in line
                          for line in Path("/proc/locks").read_text().splitlines()):
                assert sweep.poll() is None, f"the sweep did not wait for the lock:\n{sweep.stderr.read()}"
                assert time.monotonic() < deadline, "the sweep neither waited for the lock nor ended"
                time.sleep(0.05)
        except BaseException:
            sweep.kill()
            raise
    assert sweep.wait(120) == 0
    assert "leftover(s) of killed runs removed" in sweep.stderr.read()


def test_a_namespace_inode_reused_by_another_process_does_not_make_it_the_nodes(tmp_path):
    """Once a real node's namespaces are gone their inode numbers are handed out again at once (a docker build's `sh`
    got one while teardown was killing the node, and was SIGKILLed). A process in a namespace with a recorded inode
    is the node's only if the node started it (its marker), unless the node's netns is still pinned in /run/netns."""
    from devtools.realnode import NODE_MARKER, _node_pids, _proc_ns

    netns = "gcurn-reused-inode-test"
    stranger = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", "sleep 300; true"])
    ours = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", "sleep 300; true"],
                            env={**os.environ, NODE_MARKER: netns})
    try:
        for proc in (stranger, ours):   # unshare has exec'd sh in its new namespace
            deadline = time.monotonic() + 10
            while _proc_ns(proc.pid, "mnt") == _proc_ns(os.getpid(), "mnt") or \
                    not pid_cmdline(proc.pid) or pid_cmdline(proc.pid)[0] != "sh":
                assert time.monotonic() < deadline, "unshare did not start sh in a namespace of its own"
                time.sleep(0.02)
        # the recorded state of a node whose mount namespace inode is now the stranger's (its netns long gone)
        state = {"name": "reused-inode-test", "netns": netns, "mnt_ino": _proc_ns(stranger.pid, "mnt"), "pids": {}}
        assert stranger.pid not in _node_pids(state)
        state["mnt_ino"] = _proc_ns(ours.pid, "mnt")
        assert ours.pid in _node_pids(state), "a process the node started is still found by the recorded inode"
    finally:
        for proc in (stranger, ours):
            _kill_outright([proc.pid] + [int(c) for c in
                                         Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
                           if pid_alive(proc.pid) else [])
            proc.wait()
