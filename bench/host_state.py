"""Bundled provider benchmarks on real servers.

    .venv/bin/python bench/host_state.py [--nodes 2000]

1. GcuNodes on a real kube-apiserver with N nodes (GCU and not): wall time and
   write requests (from the API server's audit log) for the first and second apply.
   Targets: first under 20 s, second zero writes.
2. ContainerRuntime on a real dockerd: time to activate with `reload` versus `restart`.
"""

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from realservers import AuditLog, runtime_props, start_dockerd, stop_dockerd  # noqa: E402

from components.providers.cluster import core_api  # noqa: E402
from components.providers.container_runtime import ContainerRuntimeProvider  # noqa: E402
from components.providers.node_labels import GcuNodesProvider  # noqa: E402

NFD = "feature.node.kubernetes.io/pci-1e36.present"
COMPONENTS = ["devicePlugin", "exporter", "gfd", "toolkit"]
ADMIN = "admin"  # the user of the local cluster's admin kubeconfig, which the provider uses


def create_nodes(api, count: int) -> float:
    started = time.perf_counter()

    def create(i: int) -> None:
        labels = {NFD: "true", "enflame.com/gcu.driver.present": "true"} if i % 4 else {"pool": "cpu"}
        api.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:05d}", "labels": labels}}, _preload_content=False)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(count)))
    return time.perf_counter() - started


def settle(audit: AuditLog, quiet_seconds: float = 3.0, limit: float = 120.0) -> float:
    """Wait until nothing else writes nodes (the node-lifecycle controller taints new ones)."""
    started = time.perf_counter()
    audit.mark()
    while time.perf_counter() - started < limit:
        time.sleep(quiet_seconds)
        if audit.writes() == 0:
            break
        audit.mark()
    return time.perf_counter() - started


def bench_labels(count: int) -> None:
    from devtools.localcluster import LocalCluster

    with tempfile.TemporaryDirectory() as workdir, LocalCluster(workdir, nodes=()) as cluster:
        api = core_api(cluster.kubeconfig, None)
        print(f"created {count} nodes in {create_nodes(api, count):.1f} s")
        props = {"kubeconfig": cluster.kubeconfig, "context": None, "components": COMPONENTS, "names": [], "selector": {},
                 "driverLabel": "enflame.com/gcu.driver.present=true", "requireDriver": True, "pageSize": 500}
        audit = AuditLog(cluster)
        print(f"cluster settled after {settle(audit):.1f} s")
        provider = GcuNodesProvider()
        audit.mark()
        started = time.perf_counter()
        first = provider.create(props).outs
        first_seconds = time.perf_counter() - started
        first_writes, conflicts, others = audit.writes(user=ADMIN), audit.conflicts(user=ADMIN), audit.writes() - audit.writes(user=ADMIN)
        audit.mark()
        started = time.perf_counter()
        provider.update("gcu-nodes", first, props)
        second_seconds, second_writes = time.perf_counter() - started, audit.writes(user=ADMIN)
        print(f"GcuNodes, {count} nodes ({len(first['nodes'])} GCU):")
        print(f"  first apply : {first_seconds:6.2f} s, {first_writes} write requests, {conflicts} conflicts retried, "
              f"{others} writes by cluster controllers meanwhile "
              f"(target < 20 s: ratio {first_seconds / 20:.2f})")
        print(f"  second apply: {second_seconds:6.2f} s, {second_writes} write requests (target 0)")


def bench_runtime() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        state_dir = Path(workdir) / "dockerd"
        dockerd = start_dockerd(state_dir)
        try:
            results = {}
            for mode in ("reload", "restart"):
                Path(dockerd.config_file).write_text(json.dumps({"default-runtime": "runc", "runtimes": {}}))
                dockerd.reload()
                time.sleep(0.5)
                provider = ContainerRuntimeProvider()
                started = time.perf_counter()
                outputs = provider.create(runtime_props(dockerd, mode=mode)).outs
                results[mode] = time.perf_counter() - started
                assert outputs["active"], outputs
                provider.delete("container-runtime", outputs)
            print("ContainerRuntime activation on a real dockerd (docker nodes):")
            print(f"  reload : {results['reload']:6.2f} s (running containers untouched)")
            print(f"  restart: {results['restart']:6.2f} s (every container on the node disrupted)")
            print(f"  restart/reload ratio: {results['restart'] / results['reload']:.1f}x")
        finally:
            stop_dockerd(state_dir)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()
    bench_labels(args.nodes)
    bench_runtime()


if __name__ == "__main__":
    main()
