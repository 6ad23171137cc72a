"""Test setup: the project and tests/ on sys.path, and the program runs most tests share."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from harness import SEED_BLUEPRINT, run_full, run_program  # noqa: E402


@pytest.fixture(scope="session")
def seed_run():
    """The seed blueprint under mocks."""
    return run_program({"blueprint": str(SEED_BLUEPRINT)})


@pytest.fixture(scope="session")
def full():
    """Every component (GCU-share instead of the device plugin) under mocks."""
    return run_full()
