"""Test setup: the project and tests/ on sys.path, the program runs most tests share, the real-node lock."""

import os
import sys
import time
from pathlib import Path

import hypothesis
import pytest

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from harness import SEED_BLUEPRINT, run_full, run_program  # noqa: E402
from realnode_fixtures import real_node_machine_lock  # noqa: E402

from components.kube_support import OLDEST_SUPPORTED  # noqa: E402
from devtools import SERVER_LOGS, kubernetes_version, log_tail  # noqa: E402

# kube-apiserver emulates at most 3 minor versions back (kube-apiserver --emulated-version): the suite's newest
# Kubernetes cannot pose as one older than the oldest supported, so tests that need such a cluster run in the
# oldest-Kubernetes leg (scripts/test-oldest-kubernetes.sh, its result recorded in docs/development.md).
EMULATION_REACH = 3
OLDER_THAN_SUPPORTED = "older_than_supported"
# Engine modules that CI's time budget leaves to the extended leg (scripts/test-extended.sh, its result recorded in
# docs/development.md): README's test command deselects them unless GCU_TEST_EXTENDED=1 or only they were collected.
EXTENDED = "extended"


def pytest_configure(config):
    config.addinivalue_line("markers", f"{OLDER_THAN_SUPPORTED}: needs an API server emulating a Kubernetes older "
                                       "than the oldest supported (run by scripts/test-oldest-kubernetes.sh)")
    config.addinivalue_line("markers", f"{EXTENDED}: an engine module of the extended leg, outside CI's time budget "
                                       "(run by scripts/test-extended.sh)")


def _runs_extended(items) -> bool:
    return os.environ.get("GCU_TEST_EXTENDED") == "1" or all(item.get_closest_marker(EXTENDED) for item in items)


def _can_emulate_older_than_supported() -> bool:
    major, minor = (int(part) for part in kubernetes_version().split(".")[:2])
    return (major, minor - EMULATION_REACH) < OLDEST_SUPPORTED


def pytest_collection_modifyitems(config, items):
    left_out = set()
    if not _runs_extended(items):
        left_out.add(EXTENDED)
    if not _can_emulate_older_than_supported():
        left_out.add(OLDER_THAN_SUPPORTED)
    kept = [item for item in items if not any(item.get_closest_marker(mark) for mark in left_out)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


SLOWEST_MODULES = 15


def module_seconds(stats: dict) -> list[tuple[float, int, str]]:
    """(seconds, tests, module) of every test module, slowest first: setup, call and teardown of its tests summed as
    --durations counts them (a module runs whole on one worker, so this is its share of a worker's time)."""
    seconds: dict[str, float] = {}
    tests: dict[str, set] = {}
    for reports in stats.values():
        for report in reports:
            duration, nodeid = getattr(report, "duration", None), getattr(report, "nodeid", "")
            if duration is None or not nodeid or not getattr(report, "when", None):
                continue
            module = nodeid.split("::", 1)[0]
            seconds[module] = seconds.get(module, 0.0) + duration
            tests.setdefault(module, set()).add(nodeid)
    return sorted(((secs, len(tests[m]), m) for m, secs in seconds.items()), reverse=True)


def pytest_terminal_summary(terminalreporter):
    """Said at the end of every run (also -q, also the xdist controller, which collects nothing itself)."""
    modules = module_seconds(terminalreporter.stats)
    if len(modules) > 1:
        total = sum(secs for secs, _, _ in modules)
        terminalreporter.write_sep("=", f"slowest {min(SLOWEST_MODULES, len(modules))} modules (worker seconds; "
                                        f"{total:.0f} s in all)")
        for secs, count, module in modules[:SLOWEST_MODULES]:
            terminalreporter.write_line(f"{secs:8.1f}s  {count:3d} tests  {module}")
    if os.environ.get("GCU_TEST_EXTENDED") != "1":   # (xdist's controller is not told what its workers deselected)
        terminalreporter.write_line(f"modules marked {EXTENDED} run only when named alone or in "
                                    "scripts/test-extended.sh (outside CI's time budget)")
    if not _can_emulate_older_than_supported():
        terminalreporter.write_line(
            f"Kubernetes {kubernetes_version()}: tests marked {OLDER_THAN_SUPPORTED} were deselected (it cannot emulate "
            f"{OLDEST_SUPPORTED[0]}.{OLDEST_SUPPORTED[1] - 1}); scripts/test-oldest-kubernetes.sh runs them")

# Hypothesis profiles for every property test (HYPOTHESIS_PROFILE: dev, ci, thorough; see tests/test_properties.py).
hypothesis.settings.register_profile(
    "dev", max_examples=50, deadline=None, database=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.register_profile(
    "ci", max_examples=50, deadline=None, database=None, derandomize=True, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
# For hunting: many more examples (minutes, not for CI).
hypothesis.settings.register_profile("thorough", max_examples=600, deadline=None, database=None, suppress_health_check=list(hypothesis.HealthCheck))
# CI (CI=true) runs the derandomised profile: the same examples every run.
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

SERVER_LOG_TAILS = 8          # logs shown with a failure: the ones written last
SERVER_LOG_LINES = 25
SERVER_LOG_RECENT_SECONDS = 900


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test carries the tail of each real server's log this worker started and wrote to lately (etcd,
    kube-apiserver, kubelet, containerd, dockerd ...), so CI's output holds the cause, not only the symptom."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    now = time.time()
    recent = []
    for path in SERVER_LOGS:
        try:
            modified = path.stat().st_mtime
        except OSError:
            continue
        if now - modified < SERVER_LOG_RECENT_SECONDS:
            recent.append((modified, path))
    tails = [(f"last {SERVER_LOG_LINES} lines of {path}", log_tail(path, SERVER_LOG_LINES))
             for _, path in sorted(recent, reverse=True)[:SERVER_LOG_TAILS]]
    report.sections.extend(tails)
    collected = os.environ.get("GCU_FAILURE_LOGS")   # .ci/run prints it last, where CI's log is kept
    if collected and tails:
        text = "".join(f"--- {title}\n{tail.rstrip()}\n" for title, tail in tails)
        with open(collected, "a") as out:
            out.write(f"=== {item.nodeid} ({report.when})\n{text}")


@pytest.fixture(scope="module")
def real_node_machine():
    """The whole module holds the machine's real-node lock exclusively (realnode_fixtures.real_node_machine_lock):
    it compares the machine before and after its node."""
    with real_node_machine_lock():
        yield


@pytest.fixture(scope="module")
def real_node_shared():
    """The whole module holds the machine's real-node lock shared: its node keeps to itself."""
    with real_node_machine_lock(shared=True):
        yield


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory):
    """A private dockerd for the module's image builds (devtools/imagebuild.py); test_docker_runtime.py has its own."""
    from devtools import imagebuild

    with imagebuild.build_daemon(tmp_path_factory.mktemp("dockerd")) as daemon:
        print(f"dockerd {daemon.server_version}, storage driver {daemon.storage_driver}")
        yield daemon


@pytest.fixture(scope="session")
def seed_run():
    """The seed blueprint under mocks."""
    return run_program({"blueprint": str(SEED_BLUEPRINT)})


@pytest.fixture(scope="session")
def full():
    """Every component (GCU-share instead of the device plugin) under mocks."""
    return run_full()
