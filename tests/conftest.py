"""Test setup: the project and tests/ on sys.path, the program runs most tests share, the real-node lock."""

import fcntl
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from harness import SEED_BLUEPRINT, run_full, run_program  # noqa: E402

@pytest.fixture(scope="module")
def real_node_machine():
    """Held by a test module while it has real nodes: they take machine-wide things (/run/netns, the host's
    /usr/local/enflame through the toolkit pod) and their tests compare the machine before and after, so
    with parallel workers (scripts/test.sh) one module at a time has them."""
    lock_path = Path(tempfile.gettempdir()) / "gcu-stack-real-nodes.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def seed_run():
    """The seed blueprint under mocks."""
    return run_program({"blueprint": str(SEED_BLUEPRINT)})


@pytest.fixture(scope="session")
def full():
    """Every component (GCU-share instead of the device plugin) under mocks."""
    return run_full()
