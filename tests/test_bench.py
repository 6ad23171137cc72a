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
