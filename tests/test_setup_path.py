"""The user's setup path: `scripts/gcu-stack` builds only what it needs, only when it needs it.

A cluster that answers (a real LocalCluster) and a usable `pulumi` on PATH (a stand-in that reports a version, lists
the kubernetes plugin and records its arguments): nothing is built. The proof: GCU_CACHE_DIR is an empty directory
that stays empty, and `go`, `apt-get` and `curl` on PATH fail loudly and record any call. With no cluster answering,
the embedded local control plane is chosen, started from the (already built) toolchain and handed to the stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from realservers import PROJECT_DIR

from devtools import free_port
from devtools.localcluster import GCU_LABEL, K8S_VERSION, LocalCluster, Toolchain

pytestmark = pytest.mark.timeout(300)
GCU_STACK_CMD = PROJECT_DIR / "scripts" / "gcu-stack"

FAKE_PULUMI = """#!/usr/bin/env bash
# Stand-in for an installed Pulumi CLI: records its arguments, answers what gcu-stack asks.
printf '%s\\n' "$*" >> "$FAKE_PULUMI_LOG"
printf '%s\\n' "${PULUMI_CONFIG_PASSPHRASE-<unset>}" >> "$FAKE_PULUMI_LOG.passphrase"
case "$1" in
  # What pulumi-kubernetes does when its provider starts: a copy of the kubeconfig in $TMPDIR, never removed.
  preview|up|refresh|destroy) echo "${TMPDIR:-<unset>}" >> "$FAKE_PULUMI_LOG.tmpdir"
    [ -n "${TMPDIR:-}" ] && echo "credentials" > "$(mktemp "$TMPDIR/kubeconfigXXXXXX")" ;;
esac
case "$1" in
  version) echo "v3.272.0" ;;
  plugin) [ "$2" = ls ] && echo '[{"name": "kubernetes", "kind": "resource", "version": "4.25.0", "size": 1}]' ;;
  stack) [ "$2" = output ] && echo '{}' ;;
esac
exit 0
"""

FAIL_LOUDLY = """#!/bin/sh
echo "FAKE $(basename "$0") CALLED: $*" >&2
echo "$(basename "$0") $*" >> "$FAKE_CALLS"
exit 97
"""


def _path_without_pulumi() -> list[str]:
    """PATH entries with no `pulumi` in them (the toolchain's own CLI is on PATH under scripts/test.sh)."""
    return [d for d in os.environ.get("PATH", "").split(":") if d and not (Path(d) / "pulumi").exists()]


@pytest.fixture
def fakes(tmp_path):
    """A bin dir with the stand-in pulumi and loud go/apt-get/curl, and the files they record to."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI)
    for tool in ("go", "apt-get", "curl"):
        (bin_dir / tool).write_text(FAIL_LOUDLY)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def _env(tmp_path: Path, bin_dir: Path, kubeconfig: str, *, cache: Path, with_pulumi: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GCU_STACK", "GCU_BUILD_PULUMI", "PULUMI_BACKEND_URL", "GCU_TIMINGS_FILE",
                        "PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")}
    path = _path_without_pulumi()
    if with_pulumi:
        path = [str(bin_dir)] + path
    else:
        (bin_dir / "pulumi").unlink()
        path = [str(bin_dir)] + path
    env.update({
        "PATH": ":".join(path),
        "KUBECONFIG": kubeconfig,
        "GCU_CACHE_DIR": str(cache),
        "GCU_STATE_DIR": str(tmp_path / "state"),
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'backend'}",
        "FAKE_PULUMI_LOG": str(tmp_path / "pulumi-calls.log"),
        "FAKE_CALLS": str(tmp_path / "fake-calls.log"),
    })
    return env


def _run(args: list[str], env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    r = subprocess.run([str(GCU_STACK_CMD), *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
                       timeout=timeout)
    print(f"gcu-stack {' '.join(args)}: exit {r.returncode} in {time.monotonic() - t0:.1f}s\n{r.stderr}")
    return r


def _dead_kubeconfig(tmp_path: Path) -> str:
    """A kube context whose server does not answer (a loopback port nothing listens on)."""
    p = tmp_path / "dead.kubeconfig"
    p.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
        "current-context": "gone",
    }))
    return str(p)


def _pulumi_calls(tmp_path: Path) -> list[str]:
    p = tmp_path / "pulumi-calls.log"
    return p.read_text().splitlines() if p.exists() else []


def test_with_an_answering_cluster_and_an_installed_pulumi_up_builds_nothing(tmp_path, fakes):
    Toolchain.find()   # the cluster below is real; a missing binary fails here, loudly
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    with LocalCluster(tmp_path / "cluster", nodes=[("gcu-node-1", {GCU_LABEL: "true"})], audit=False) as cluster:
        env = _env(tmp_path, fakes, cluster.kubeconfig, cache=cache)
        r = _run(["up"], {**env, "PULUMI_CONFIG_PASSPHRASE": "correct horse"})
    assert r.returncode == 0, r.stderr
    # nothing was built: the cache is still empty and no build tool was called
    assert sorted(p.name for p in cache.iterdir()) == []
    assert not (tmp_path / "fake-calls.log").exists(), (tmp_path / "fake-calls.log").read_text()
    assert "[kube.sh]" not in r.stderr and "building the toolchain" not in r.stderr
    # it said what it uses
    assert "Pulumi: using the installed CLI" in r.stderr and "v3.272.0" in r.stderr
    assert "cluster: context 'gcu-local'" in r.stderr and f"answers: Kubernetes v{K8S_VERSION}" in r.stderr
    assert "embedded" not in r.stderr
    # and ran the stack with it: preview with the policy pack, then up, on the default stack
    calls = _pulumi_calls(tmp_path)
    assert "version" in calls and "plugin ls --json" in calls
    assert "stack select --create dev" in calls
    preview = [c for c in calls if c.startswith("preview ")]
    up = [c for c in calls if c.startswith("up ")]
    assert preview == ["preview --policy-pack policies"] and up == ["up --yes --skip-preview"], calls
    assert calls.index(preview[0]) < calls.index(up[0])
    assert not (tmp_path / "state" / "local-cluster").exists()


def test_pulumi_runs_with_a_private_tmpdir_that_goes_with_the_command(tmp_path, fakes):
    """pulumi-kubernetes leaves a copy of the kubeconfig in $TMPDIR at each start (tests/test_engine_e2e.py shows the
    real provider doing it): each command gives Pulumi its own, removes it at the end, and removes what a killed one
    left."""
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    private = tmp_path / "state" / "tmp"
    killed = private / "999999999"   # no such pid: a command killed outright
    killed.mkdir(parents=True)
    (killed / "kubeconfig123").write_text("credentials")
    with LocalCluster(tmp_path / "cluster", nodes=[("gcu-node-1", {GCU_LABEL: "true"})], audit=False) as cluster:
        (tmp_path / "cache").mkdir()
        env = _env(tmp_path, fakes, cluster.kubeconfig, cache=tmp_path / "cache")
        r = _run(["up"], {**env, "PULUMI_CONFIG_PASSPHRASE": "correct horse", "TMPDIR": str(system_tmp)})
    assert r.returncode == 0, r.stderr
    used = set((tmp_path / "pulumi-calls.log.tmpdir").read_text().split())
    assert len(used) == 1 and Path(used.pop()).parent == private, used   # preview and up: one private directory
    assert list(private.iterdir()) == [] and private.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in system_tmp.iterdir() if p.name.startswith("kubeconfig")] == []


def test_a_stack_of_yours_under_an_empty_passphrase_is_refused_and_the_ways_out_work(tmp_path, fakes):
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    with LocalCluster(tmp_path / "cluster", nodes=[], audit=False) as cluster:
        env = _env(tmp_path, fakes, cluster.kubeconfig, cache=cache)
        for command in ("plan", "preview", "up", "refresh", "destroy"):
            for empty in ({}, {"PULUMI_CONFIG_PASSPHRASE": ""}):
                r = _run([command], {**env, **empty}, timeout=60)
                assert r.returncode == 2, (command, r.stderr)
                assert "refused: the stack dev would keep its secrets" in r.stderr and "EMPTY passphrase" in r.stderr
                assert "PULUMI_CONFIG_PASSPHRASE" in r.stderr and "change-secrets-provider" in r.stderr
        assert _pulumi_calls(tmp_path) == [] and sorted(p.name for p in cache.iterdir()) == []
        # a passphrase file, a Pulumi Cloud backend, or the `pulumi` command (to move the stack off it): go ahead
        secret = tmp_path / "passphrase"
        secret.write_text("correct horse\n")
        assert _run(["preview"], {**env, "PULUMI_CONFIG_PASSPHRASE_FILE": str(secret)}).returncode == 0
        assert _run(["preview"], {**env, "PULUMI_CONFIG_PASSPHRASE": "correct horse"}).returncode == 0
        assert _run(["preview"], {**env, "PULUMI_BACKEND_URL": "https://api.pulumi.com"}).returncode == 0
        assert _run(["pulumi", "stack", "ls"], env).returncode == 0
    calls = _pulumi_calls(tmp_path)
    assert [c for c in calls if c.startswith("preview")] == ["preview --policy-pack policies"] * 3, calls
    assert "stack ls" in calls
    # with a passphrase file, pulumi is not handed an empty passphrase that would take precedence over it
    seen = Path(f"{tmp_path / 'pulumi-calls.log'}.passphrase").read_text().splitlines()
    assert seen[calls.index("stack select --create dev")] == "<unset>"


@pytest.mark.parametrize("command", ["plan", "preview", "up", "destroy"])
def test_a_configured_context_that_does_not_answer_fails_naming_it_and_does_nothing(tmp_path, fakes, command):
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = _env(tmp_path, fakes, _dead_kubeconfig(tmp_path), cache=cache)
    r = _run([command], env, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "the configured kube context does not answer: context 'gone'" in r.stderr, r.stderr
    assert "Connection refused" in r.stderr and "pass --local" in r.stderr
    assert "embedded local control plane (" not in r.stderr and not r.stdout.strip()
    # nothing built, started or run
    assert sorted(p.name for p in cache.iterdir()) == []
    assert not (tmp_path / "fake-calls.log").exists() and _pulumi_calls(tmp_path) == []
    assert not (tmp_path / "state" / "local-cluster").exists()


def test_plan_with_local_chooses_the_embedded_control_plane_whatever_the_context(tmp_path, fakes):
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = _env(tmp_path, fakes, _dead_kubeconfig(tmp_path), cache=cache)
    r = _run(["plan", "--local"], env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "plan: pulumi=installed cluster=embedded"
    assert "cluster: the embedded local control plane (--local)" in r.stderr and "SIMULATED nodes" in r.stderr
    assert sorted(p.name for p in cache.iterdir()) == []


def test_with_no_kube_config_at_all_the_embedded_control_plane_is_chosen_and_said(tmp_path, fakes):
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    home = tmp_path / "home"   # no ~/.kube/config
    home.mkdir()
    env = _env(tmp_path, fakes, "", cache=cache)
    del env["KUBECONFIG"]
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env["HOME"] = str(home)
    r = _run(["plan"], env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "plan: pulumi=installed cluster=embedded"
    assert "cluster: no kube config on this machine" in r.stderr and "SIMULATED nodes" in r.stderr


def test_local_with_a_stack_that_names_its_cluster_is_refused(tmp_path, fakes):
    env = _env(tmp_path, fakes, _dead_kubeconfig(tmp_path), cache=tmp_path)
    r = _run(["preview", "--local"], {**env, "GCU_STACK": "prod"}, timeout=60)
    assert r.returncode == 2 and "--local uses the embedded cluster" in r.stderr and "GCU_STACK" in r.stderr
    assert _pulumi_calls(tmp_path) == []


def test_plan_with_no_pulumi_on_path_builds_the_pulumi_toolchain(tmp_path, fakes):
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = _env(tmp_path, fakes, _dead_kubeconfig(tmp_path), cache=cache, with_pulumi=False)
    r = _run(["plan", "--local"], env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "plan: pulumi=build cluster=embedded"
    assert "no pulumi on PATH" in r.stderr
    # an installed CLI that is too old is not used either
    old = fakes / "pulumi"
    old.write_text(FAKE_PULUMI.replace("v3.272.0", "v3.100.0"))
    old.chmod(0o755)
    r = _run(["plan", "--local"], env, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == "plan: pulumi=build cluster=embedded"
    assert "is v3.100.0, older than v3.259.0" in r.stderr
    # GCU_BUILD_PULUMI=1 asks for the build even with a usable CLI
    old.write_text(FAKE_PULUMI)
    r = _run(["plan", "--local"], {**env, "GCU_BUILD_PULUMI": "1"}, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == "plan: pulumi=build cluster=embedded"


def test_up_local_starts_and_uses_the_embedded_control_plane(tmp_path, fakes):
    from devtools import CACHE_DIR

    Toolchain.find()   # built by scripts/test.sh; the command must find it there and build nothing more
    env = _env(tmp_path, fakes, _dead_kubeconfig(tmp_path), cache=CACHE_DIR)
    state = tmp_path / "state"
    try:
        r = _run(["up", "--local"], env)
        assert r.returncode == 0, r.stderr
        assert "-> the embedded local control plane" in r.stderr
        # kube.sh ran (the embedded path needs it) and found every part built already
        parts = {line.split()[1]: line for line in r.stderr.splitlines() if line.startswith("[kube.sh]   ")}
        assert {"kubernetes", "etcd", "kwok"} <= set(parts), r.stderr
        assert all("cached" in parts[p] for p in ("kubernetes", "etcd", "kwok")), parts
        kubeconfig = str(state / "local-cluster" / "admin.kubeconfig")
        calls = _pulumi_calls(tmp_path)
        assert "stack select --create local" in calls
        assert f"config set gcu-stack:kubeconfig {kubeconfig}" in calls
        assert f"preview --policy-pack policies --policy-pack-config {state / 'policy-local.json'}" in calls
        assert "up --yes --skip-preview" in calls
        # the cluster it handed to the stack is running and has the simulated GCU nodes
        cluster = LocalCluster.from_state_dir(state / "local-cluster")
        nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "enflame.com/gcu.driver.present=true",
                                           "-o", "json").stdout)["items"]
        assert sorted(n["metadata"]["name"] for n in nodes) == ["gcu-node-1", "gcu-node-2"]
    finally:
        down = _run(["local-down"], env, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not (state / "local-cluster" / "state.json").exists()


def test_one_command_at_a_time_and_a_lock_left_by_a_killed_command_is_cleared(tmp_path, fakes):
    """The run lock refuses a second command at once; a backend lock whose holder is provably gone (stackops/holders.py)
    is removed by the next command, saying so; one that cannot be proved stale stops it, saying how to proceed."""
    import fcntl

    from stackops import holders, locks

    Toolchain.find()
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    with LocalCluster(tmp_path / "cluster", nodes=[("gcu-node-1", {GCU_LABEL: "true"})], audit=False) as cluster:
        env = {**_env(tmp_path, fakes, cluster.kubeconfig, cache=cache), "PULUMI_CONFIG_PASSPHRASE": "correct horse"}
        backend = tmp_path / "backend"
        # Another command holds the stack: refused before anything runs.
        run_lock = locks.run_lock_path(backend, "gcu-stack", "dev")
        run_lock.parent.mkdir(parents=True, exist_ok=True)
        with open(run_lock, "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            held.write("`scripts/gcu-stack up` (pid 4242 on ci, started 2026-11-28T10:00:00Z)")
            held.flush()
            refused = _run(["up"], env)
        assert refused.returncode == 1
        assert "stack dev is being changed right now by `scripts/gcu-stack up` (pid 4242" in refused.stderr
        assert not [c for c in _pulumi_calls(tmp_path) if c.startswith(("preview", "up "))]

        # A lock left by a command killed outright, with its holder record: proved stale, removed, and the up runs.
        dead = subprocess.Popen(["sleep", "60"])
        record = holders.write(backend, dead.pid, "dev", ["pulumi", "up", "--yes"])
        dead.kill()
        dead.wait()
        lock_dir = locks.lock_dirs(backend, "gcu-stack", "dev")[0]
        lock_dir.mkdir(parents=True)
        (lock_dir / "stale.json").write_text(json.dumps({"pid": dead.pid, "username": record.user, "hostname": record.hostname,
                                                         "timestamp": "2026-11-28T10:00:00Z"}))
        cleared = _run(["up"], env)
        assert cleared.returncode == 0, cleared.stderr
        assert f"stack dev: removed the lock left by `pulumi up --yes` (pid {dead.pid}" in cleared.stderr
        assert not (lock_dir / "stale.json").exists() and list(holders.holders_dir(backend).glob("*.json")) == []
        assert [c for c in _pulumi_calls(tmp_path) if c.startswith("up ")] == ["up --yes --skip-preview"]

        # A lock gcu-stack did not start (no holder record): never removed on a guess.
        (lock_dir / "plain.json").write_text(json.dumps({"pid": dead.pid, "username": "ci", "hostname": record.hostname,
                                                         "timestamp": "2026-11-28T11:00:00Z"}))
        blocked = _run(["destroy"], env)
        assert blocked.returncode == 1 and "gcu-stack did not start it" in blocked.stderr
        assert f"rm {lock_dir / 'plain.json'}" in blocked.stderr and (lock_dir / "plain.json").exists()
        assert not [c for c in _pulumi_calls(tmp_path) if c.startswith("destroy")]
