"""Activating the enflame runtime: containerd (restart) next to docker (SIGHUP reload), same run, real daemons.

    .venv/bin/python bench/containerd_activation.py [--rounds 5] [--containers 10]

For each daemon, `--containers` long-running containers are started first (as on a busy
GCU node); then, `--rounds` times: activate, a no-op activation, restore. Reported:

* activation wall time (write + restart/reload + verification through the daemon's API),
* for containerd, the restart itself (stop + start until it answers, from the restart log),
* the no-op activation (must restart nothing),
* running containers disturbed (PID or start time changed, or not running): must be 0,
* ratios containerd / docker.

containerd 1.6 has no reload (it exits on SIGHUP): activation is a restart, which the
running containers survive because their shims do not depend on containerd.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from realservers import PROJECT_DIR, PYTHON, reload_count, start_dockerd, stop_dockerd  # noqa: E402

from components.node import containerd_host, cri_client, runtime_host  # noqa: E402
from devtools import start_time  # noqa: E402
from devtools.containerd import Containerd  # noqa: E402


def stats(values: list[float]) -> str:
    return f"median {statistics.median(values):6.3f} s  (min {min(values):.3f}, max {max(values):.3f})"


def bench_containerd(workdir: Path, rounds: int, containers: int) -> dict:
    state_dir = workdir / "containerd"
    subprocess.run([PYTHON, "-m", "devtools.containerd", "up", "--state-dir", str(state_dir)], check=True, cwd=PROJECT_DIR,
                   capture_output=True, timeout=120)
    daemon = Containerd.from_state_dir(state_dir)
    try:
        settings = containerd_host.ContainerdSettings(
            config_toml=str(daemon.config_file), dropin=str(daemon.workdir / "conf.d" / "99-enflame.toml"),
            address=daemon.address, restart_command=daemon.restart_command(), label="bench-node", verify_seconds=30)
        host = containerd_host.ContainerdHost(settings)
        original = daemon.config_file.read_bytes()
        workloads = {}
        for i in range(containers):
            pid = daemon.run_container(f"bench-{i}", "sleep", "36000")
            workloads[f"bench-{i}"] = (pid, start_time(pid))
        activation, restart, noop, restore, disturbed, noop_restarts = [], [], [], [], 0, 0
        for _ in range(rounds):
            logged = len(daemon.restarts())
            started = time.perf_counter()
            result = containerd_host.activate(host, daemon.runc_path)
            activation.append(time.perf_counter() - started)
            assert result["active"] and result["restarted"], result
            restart.extend(r["seconds"] for r in daemon.restarts()[logged:])
            logged = len(daemon.restarts())
            started = time.perf_counter()
            again = containerd_host.activate(host, daemon.runc_path)
            noop.append(time.perf_counter() - started)
            noop_restarts += len(daemon.restarts()) - logged
            assert again["active"] and not again["changed"], again
            started = time.perf_counter()
            containerd_host.restore(host, result)
            restore.append(time.perf_counter() - started)
            assert daemon.config_file.read_bytes() == original
            assert cri_client.runtimes(daemon.address)["default"] == "runc"
        for name, (pid, began) in workloads.items():
            alive = daemon.task_status(name) == "RUNNING" and daemon.task_pid(name) == pid and start_time(pid) == began
            disturbed += not alive
        return {"activation": activation, "restart": restart, "noop": noop, "restore": restore,
                "disturbed": disturbed, "containers": containers, "noop_restarts": noop_restarts,
                "version": cri_client.version(daemon.address)["version"]}
    finally:
        subprocess.run([PYTHON, "-m", "devtools.containerd", "down", "--state-dir", str(state_dir)], cwd=PROJECT_DIR,
                       capture_output=True, timeout=120)


def bench_docker(workdir: Path, rounds: int, containers: int) -> dict:
    state_dir = workdir / "dockerd"
    dockerd = start_dockerd(state_dir)
    try:
        Path(dockerd.config_file).write_text(json.dumps({"default-runtime": "runc", "runtimes": {}}))
        dockerd.reload()
        time.sleep(0.5)
        original = b'{"log-level": "info"}\n'
        Path(dockerd.config_file).write_bytes(original)
        host = runtime_host.LocalHost(runtime_host.HostSettings(
            daemon_json=str(dockerd.config_file), docker_host=dockerd.host, pid_file=str(dockerd.pidfile),
            restart_command=["false"], label="bench-node", verify_seconds=30))
        ids = [dockerd.docker("run", "-d", "--network", "none", "gcu-test-base:latest", "sleep", "36000").stdout.strip()
               for _ in range(containers)]

        def state(container: str) -> tuple:
            s = json.loads(dockerd.docker("inspect", container).stdout)[0]["State"]
            return s["Running"], s["Pid"], s["StartedAt"]

        before = {c: state(c) for c in ids}
        activation, noop, restore, noop_reloads = [], [], [], 0
        for _ in range(rounds):
            started = time.perf_counter()
            result = runtime_host.activate(host, dockerd.runc_path, "reload")
            activation.append(time.perf_counter() - started)
            assert result["active"], result
            reloads = reload_count(dockerd)
            started = time.perf_counter()
            again = runtime_host.activate(host, dockerd.runc_path, "reload")
            noop.append(time.perf_counter() - started)
            noop_reloads += reload_count(dockerd) - reloads
            assert again["active"] and not again["changed"], again
            started = time.perf_counter()
            runtime_host.restore(host, result, "reload")
            restore.append(time.perf_counter() - started)
            assert Path(dockerd.config_file).read_bytes() == original
        disturbed = sum(state(c) != before[c] for c in ids)
        dockerd.docker("rm", "-f", *ids, check=False)
        version = dockerd.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
        return {"activation": activation, "noop": noop, "restore": restore, "disturbed": disturbed,
                "containers": containers, "noop_reloads": noop_reloads, "version": version}
    finally:
        stop_dockerd(state_dir)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--containers", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        ctd = bench_containerd(Path(workdir), args.rounds, args.containers)
        dkr = bench_docker(Path(workdir), args.rounds, args.containers)
    print(f"enflame runtime activation, {args.rounds} rounds, {args.containers} running containers per daemon")
    print(f"  containerd {ctd['version']} (restart):")
    print(f"    activation        : {stats(ctd['activation'])}")
    print(f"      of which restart: {stats(ctd['restart'])}")
    print(f"    no-op activation  : {stats(ctd['noop'])}, restarts {ctd['noop_restarts']} (target 0)")
    print(f"    restore           : {stats(ctd['restore'])}")
    print(f"    containers disturbed: {ctd['disturbed']} of {ctd['containers']} (target 0)")
    print(f"  docker {dkr['version']} (SIGHUP reload):")
    print(f"    activation        : {stats(dkr['activation'])}")
    print(f"    no-op activation  : {stats(dkr['noop'])}, reloads {dkr['noop_reloads']} (target 0)")
    print(f"    restore           : {stats(dkr['restore'])}")
    print(f"    containers disturbed: {dkr['disturbed']} of {dkr['containers']} (target 0)")
    ratio = statistics.median(ctd["activation"]) / statistics.median(dkr["activation"])
    print(f"  containerd/docker activation ratio: {ratio:.2f}x "
          f"(restore {statistics.median(ctd['restore']) / statistics.median(dkr['restore']):.2f}x, "
          f"no-op {statistics.median(ctd['noop']) / statistics.median(dkr['noop']):.2f}x)")
    if ctd["disturbed"] or dkr["disturbed"] or ctd["noop_restarts"] or dkr["noop_reloads"]:
        sys.exit("FAILED: a running container was disturbed or a no-op activation restarted/reloaded a daemon")


if __name__ == "__main__":
    main()
