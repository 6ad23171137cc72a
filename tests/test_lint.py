"""The linter (ruff, settings in pyproject.toml) is clean: CI fails on a finding, as it does on a failing test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"ruff check . found (fix them, or `ruff check --fix .`):\n{result.stdout}{result.stderr}"
