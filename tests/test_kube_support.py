"""Which Kubernetes versions the stack accepts (components/kube_support.py), read from real API servers: one of the
version the toolchain builds and one that emulates an older minor version (kube-apiserver --emulated-version), as a
cluster of that version behaves. The same refusal through the real engine: tests/test_engine_cluster_identity.py."""

from __future__ import annotations

import pytest

from components import kube_support
from components.kube_support import NEWEST_PROVEN, OLDEST_SUPPORTED, caution, effective_version, refusal
from components.providers.cluster import core_api, server_version
from components.providers.cluster_guard import ClusterGuardProvider

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


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from devtools.localcluster import LocalCluster

    root = tmp_path_factory.mktemp("versions")
    with LocalCluster(root / "current", nodes=[]) as current, \
            LocalCluster(root / "older", nodes=[], extra_apiserver_args=[f"--emulated-version={OLDER}"]) as older:
        yield {"current": current, "older": older}


def _props(cluster) -> dict:
    return {"kubeconfig": str(cluster.kubeconfig), "context": None, "adopt": None, "clusterUid": None}


def test_a_real_api_servers_version_is_read_with_what_it_emulates(servers):
    current = server_version(core_api(str(servers["current"].kubeconfig), None))
    older = server_version(core_api(str(servers["older"].kubeconfig), None))
    assert effective_version(current) == OLDEST_SUPPORTED <= NEWEST_PROVEN
    assert effective_version(older) == tuple(int(p) for p in OLDER.split("."))
    assert older["gitVersion"] == current["gitVersion"]   # the same binary, behaving as the older version


def test_the_guard_refuses_an_older_cluster_in_its_check_and_accepts_a_supported_one(servers):
    provider = ClusterGuardProvider()
    assert provider.check({}, _props(servers["current"])).failures == []
    failures = provider.check({}, _props(servers["older"])).failures
    assert [f.property for f in failures] == ["context"]
    reason = failures[0].reason
    assert reason.startswith(f"refused: the cluster {servers['older'].server}, runs Kubernetes {OLDER} "
                             f"(kube-apiserver v"), reason
    assert f"emulating {OLDER}" in reason and kube_support.supported_range() in reason, reason
    # cluster-check (given the recorded UID) leaves the version to `cluster`; an unreachable cluster is reported by
    # the identity check, not here.
    assert provider.check({}, {**_props(servers["older"]), "clusterUid": "u"}).failures == []
