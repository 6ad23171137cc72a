"""Which Kubernetes versions the stack accepts (components/kube_support.py), read from real API servers: one of the
version the toolchain builds and ones that emulate an older minor version (kube-apiserver --emulated-version), as a
cluster of that version behaves. A cluster older than supported needs the oldest-Kubernetes leg (tests/conftest.py).
The same refusal through the real engine: tests/test_engine_cluster_identity.py."""

from __future__ import annotations

import pytest

from components import kube_support
from components.kube_support import NEWEST_PROVEN, OLDEST_SUPPORTED, caution, effective_version, refusal
from components.providers.cluster import core_api, server_version
from components.providers.cluster_guard import ClusterGuardProvider
from devtools.localcluster import K8S_VERSION, LocalCluster

OLDER = f"{OLDEST_SUPPORTED[0]}.{OLDEST_SUPPORTED[1] - 1}"


@pytest.mark.parametrize("info, version", [
    ({"major": "1", "minor": "33", "gitVersion": "v1.33.4"}, (1, 33)),
    ({"major": "1", "minor": "31+", "gitVersion": "v1.31.2-eks-1"}, (1, 31)),          # managed clusters' "+"
    ({"major": "1", "minor": "33", "emulationMajor": "1", "emulationMinor": "32"}, (1, 32)),
    ({"major": "", "minor": "", "gitVersion": "v1.30.0-gke.1"}, (1, 30)),
    ({"gitVersion": "unknown"}, None),
])
def test_the_version_a_cluster_behaves_as(info, version):
    assert effective_version(info) == version


def test_older_than_supported_is_refused_newer_than_proven_is_a_warning_only():
    at = {"major": str(OLDEST_SUPPORTED[0]), "minor": str(OLDEST_SUPPORTED[1])}
    assert refusal(at, "the cluster x") is None and caution(at, "the cluster x") is None
    older = {"major": "1", "minor": str(OLDEST_SUPPORTED[1] - 1), "gitVersion": f"v{OLDER}.7"}
    message = refusal(older, "the cluster https://x:6443,")
    assert message.startswith(f"refused: the cluster https://x:6443, runs Kubernetes {OLDER} (v{OLDER}.7)")
    assert kube_support.supported_range() in message and "Nothing was done" in message
    newer = {"major": "1", "minor": str(NEWEST_PROVEN[1] + 1)}
    assert refusal(newer, "the cluster x") is None and "newer than the newest" in caution(newer, "the cluster x")
    # A version nobody can read is not refused for it (reaching the cluster is checked, with its own message).
    assert refusal({}, "the cluster x") is None


RUNNING = tuple(int(part) for part in K8S_VERSION.split(".")[:2])
# The oldest version the running kube-apiserver emulates (3 minor versions back, never before 1.31).
FARTHEST_EMULATED = max((RUNNING[0], RUNNING[1] - 3), (1, 31))


def _cluster(tmp_path_factory, name: str, emulated: tuple[int, int] | None = None):
    root = tmp_path_factory.mktemp(name)
    args = [f"--emulated-version={emulated[0]}.{emulated[1]}"] if emulated else []
    return LocalCluster(root / "cluster", nodes=[], extra_apiserver_args=args)


@pytest.fixture(scope="module")
def current(tmp_path_factory):
    with _cluster(tmp_path_factory, "current") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def emulating(tmp_path_factory):
    with _cluster(tmp_path_factory, "emulating", FARTHEST_EMULATED) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def older(tmp_path_factory):
    with _cluster(tmp_path_factory, "older", tuple(int(p) for p in OLDER.split("."))) as cluster:
        yield cluster


def _props(cluster) -> dict:
    return {"kubeconfig": str(cluster.kubeconfig), "context": None, "adopt": None, "clusterUid": None}


def _version(cluster) -> dict:
    return server_version(core_api(str(cluster.kubeconfig), None))


def test_a_real_api_servers_version_is_read_with_what_it_emulates(current, emulating):
    assert effective_version(_version(current)) == RUNNING
    assert OLDEST_SUPPORTED <= RUNNING <= NEWEST_PROVEN   # the suite runs on a supported, proven version
    assert effective_version(_version(emulating)) == FARTHEST_EMULATED
    assert _version(emulating)["gitVersion"] == _version(current)["gitVersion"]   # the same binary, posing older


def test_the_guard_accepts_supported_clusters_also_when_they_emulate_an_older_supported_version(current, emulating):
    provider = ClusterGuardProvider()
    assert provider.check({}, _props(current)).failures == []
    if FARTHEST_EMULATED >= OLDEST_SUPPORTED:
        assert provider.check({}, _props(emulating)).failures == []


@pytest.mark.older_than_supported
def test_the_guard_refuses_an_older_cluster_in_its_check(older):
    assert effective_version(_version(older)) == tuple(int(p) for p in OLDER.split("."))
    provider = ClusterGuardProvider()
    failures = provider.check({}, _props(older)).failures
    assert [f.property for f in failures] == ["context"]
    reason = failures[0].reason
    assert reason.startswith(f"refused: the cluster {older.server}, runs Kubernetes {OLDER} "
                             f"(kube-apiserver v"), reason
    assert f"emulating {OLDER}" in reason and kube_support.supported_range() in reason, reason
    # cluster-check (given the recorded UID) leaves the version to `cluster`; an unreachable cluster is reported by
    # the identity check, not here.
    assert provider.check({}, {**_props(older), "clusterUid": "u"}).failures == []
