"""The benchmarks (bench/, docs/development.md) still start: each answers --help. CI runs no benchmark, so without
this a moved module breaks one unnoticed (bench/containerd_activation.py did, until this test)."""

import subprocess
import sys

import pytest
from realservers import PROJECT_DIR

BENCHMARKS = sorted(p.name for p in (PROJECT_DIR / "bench").glob("*.py"))


def test_there_are_benchmarks():
    assert len(BENCHMARKS) >= 5, BENCHMARKS


@pytest.mark.parametrize("script", BENCHMARKS)
def test_each_benchmark_starts(script):
    done = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage" in done.stdout.lower(), done.stdout


def test_an_engine_benchmark_finds_the_toolchain_cli_with_nothing_on_path(tmp_path, monkeypatch):
    # bench/driver_upgrade.py and engine_up.py make their stack with prepare_stack; run after README's first command,
    # PATH has no `pulumi` (that failed with FileNotFoundError: 'pulumi').
    from types import SimpleNamespace

    from engine import prepare_stack

    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    cluster = SimpleNamespace(kubeconfig=str(tmp_path / "kubeconfig"))
    docker = tmp_path / "docker"
    dockerd = SimpleNamespace(config_file=docker / "daemon.json", host=f"unix://{docker}/docker.sock", pidfile=docker / "docker.pid",
                              runc_path="/usr/bin/runc")
    (tmp_path / "bench").mkdir()
    stack, _ = prepare_stack(tmp_path / "bench", cluster, dockerd, name="bench-path")
    assert stack.get_config("gcu-stack:kubeconfig").value == cluster.kubeconfig
