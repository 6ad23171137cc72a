"""A driver version change on 100 simulated GCU nodes: gcu-stack's rolling upgrade next to gcu-upgrade-manager's
method (destroy the whole stack and deploy it again), in the same run, on the same cluster, with the real engine.

    .venv/bin/python bench/driver_upgrade.py [--nodes 100] [--max-parallel 10] [--max-unavailable 10%]

Measured for each method, from a watch of the API server (polled every 0.5 s):
  wall time           of the `pulumi up` (or destroy + up) that moves the driver from 1.0 to 2.0
  most unavailable    the most GCU nodes unschedulable or without a Ready driver pod at once
  GCU pod disruptions every GCU-requesting pod that ended during the change (evicted, deleted), plus
                      every one left running while its node's driver pod was gone
  driver pulled       of those, the GCU pods that kept running while the driver was taken from under
                      them (a job that loses its device mid-run), as destroy-and-recreate does
  moved twice         of those, pods that were themselves replacements created during the change: a job
                      evicted again from the node it had been moved to (0: each job moved at most once)
  no device plugin    node-seconds during which a GCU node had no Ready device-plugin pod
Ordinary pods (no GCU) are counted too: neither method may touch them.

Then, on gcu-stack's side, a change to nothing the driver installs (its image pull policy) at 2.0: the
restart-only path, measured the same way plus the most nodes cordoned at once. Its driver pods are replaced
under running jobs by design: the new pod finds its version loaded and leaves the module alone, so those
are counted apart (driver pods replaced, and how many under a running job), not as a driver pulled.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from engine import GCU_NODE_LABELS, GCUS, local_servers, prepare_stack, set_json_config  # noqa: E402
from harness import seed_spec  # noqa: E402

GCU = "enflame.com/gcu"


def spec(version: str, **driver) -> dict:
    return seed_spec(**{"driver.notDeploy": False, "driver.version": version, **{f"driver.{k}": v for k, v in driver.items()}})


def workloads(gcu_pods: int, ordinary: int) -> list[dict]:
    def deployment(name: str, replicas: int, limits: dict) -> dict:
        labels = {"app": name}
        container = {"name": "main", "image": f"{name}:1", **({"resources": {"limits": limits}} if limits else {})}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
                "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}

    return [deployment("training", gcu_pods, {GCU: "1"}), deployment("web", ordinary, {})]


class Watch:
    """Polls nodes and pods: unavailable nodes, device-plugin downtime, disturbed pods."""

    def __init__(self, cluster, gcu_nodes: list[str]):
        self.cluster, self.gcu_nodes = cluster, set(gcu_nodes)
        self.most_unavailable = 0
        self.most_cordoned = 0
        self.plugin_down = 0.0  # node-seconds
        self.gcu_seen: dict[str, str] = {}  # uid -> node, every GCU pod seen running
        self.web_uids_start: set[str] = set()
        self.gcu_uids_start: set[str] = set()
        self.driverless_under_job: set[str] = set()  # GCU pod uids that ran on a node without a driver pod
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _list(self, *args: str) -> list[dict]:
        return json.loads(self.cluster.kubectl(*args, "-o", "json", timeout=120).stdout)["items"]

    @staticmethod
    def _uids(pods: list[dict], app: str) -> set[str]:
        return {p["metadata"]["uid"] for p in pods if (p["metadata"].get("labels") or {}).get("app") == app}

    def _sample(self) -> int:
        """Records what it sees; returns how many GCU nodes have no ready device plugin."""
        nodes = {n["metadata"]["name"]: n for n in self._list("get", "nodes")}
        pods = self._list("get", "pods", "--all-namespaces")
        by_name = {}
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])
            node = (pod.get("spec") or {}).get("nodeName")
            by_name.setdefault((labels.get("app.kubernetes.io/component"), node), []).append(ready and not pod["metadata"].get("deletionTimestamp"))
            if labels.get("app") == "training" and node and (pod.get("status") or {}).get("phase") == "Running":
                self.gcu_seen[pod["metadata"]["uid"]] = node
        unavailable = 0
        self.most_cordoned = max(self.most_cordoned, sum(1 for n in self.gcu_nodes if ((nodes.get(n) or {}).get("spec") or {}).get("unschedulable")))
        drivers = {n for n in self.gcu_nodes if any(by_name.get(("driver", n), []))}
        for name in self.gcu_nodes:
            node = nodes.get(name) or {}
            if (node.get("spec") or {}).get("unschedulable") or name not in drivers:
                unavailable += 1
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            if labels.get("app") == "training" and node in self.gcu_nodes and node not in drivers \
                    and (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
                self.driverless_under_job.add(pod["metadata"]["uid"])
        self.most_unavailable = max(self.most_unavailable, unavailable)
        return sum(1 for n in self.gcu_nodes if not any(by_name.get(("devicePlugin", n), [])))

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            down = self._sample()
            now = time.monotonic()
            self.plugin_down += down * (now - last)
            last = now
            time.sleep(0.5)

    def __enter__(self) -> "Watch":
        pods = self._list("get", "pods", "-n", "default")
        self.web_uids_start = self._uids(pods, "web")
        self.gcu_uids_start = self._uids(pods, "training")
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        pods = self._list("get", "pods", "-n", "default")
        self.gcu_uids_end = self._uids(pods, "training")
        self.web_uids_end = self._uids(pods, "web")

    @property
    def gcu_disturbed(self) -> int:
        ended = set(self.gcu_seen) - self.gcu_uids_end  # evicted or deleted during the change (replacements too)
        return len(ended | self.driverless_under_job)

    @property
    def moved_twice(self) -> int:
        return len(set(self.gcu_seen) - self.gcu_uids_end - self.gcu_uids_start)

    @property
    def driver_pulled(self) -> int:
        return len(self.driverless_under_job)

    @property
    def web_disturbed(self) -> int:
        return len(self.web_uids_start - self.web_uids_end)


def wait_workloads(cluster, gcu_pods: int, ordinary: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        deployments = json.loads(cluster.kubectl("get", "deployments", "-n", "default", "-o", "json").stdout)["items"]
        ready = {d["metadata"]["name"]: (d.get("status") or {}).get("readyReplicas", 0) for d in deployments}
        if ready.get("training") == gcu_pods and ready.get("web") == ordinary:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"workloads not ready: {ready}")
        time.sleep(1)


def driver_uids(cluster) -> dict[str, str]:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l", "app.kubernetes.io/component=driver", "-o", "json").stdout)["items"]
    return {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in pods if p["spec"].get("nodeName")}


def job_nodes(cluster) -> set[str]:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "default", "-l", "app=training", "-o", "json").stdout)["items"]
    return {p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"}


def figures(watch: Watch, seconds: float) -> dict:
    return {"seconds": seconds, "most_unavailable": watch.most_unavailable, "most_cordoned": watch.most_cordoned,
            "gcu_disturbed": watch.gcu_disturbed, "gcu_ended": len(set(watch.gcu_seen) - watch.gcu_uids_end), "moved_twice": watch.moved_twice,
            "driver_pulled": watch.driver_pulled, "web_disturbed": watch.web_disturbed, "plugin_down": watch.plugin_down}


def step_seconds(reports: dict) -> tuple[dict, float]:
    """From the rollout's per-node reports: the mean seconds each node spent in each state, and in all."""
    spent: dict[str, list[float]] = {}
    for report in reports.values():
        states = report["states"]
        ends = [s["second"] for s in states[1:]] + [report["seconds"]]
        for state, end in zip(states, ends, strict=True):
            spent.setdefault(state["state"], []).append(end - state["second"])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {k: mean(v) for k, v in spent.items()}, mean([r["seconds"] for r in reports.values()])


def rollout_span(reports: dict) -> float:
    """Seconds from the first node's start to the last node's end (the reports' times are to the second)."""
    from datetime import datetime, timedelta

    def at(state: dict) -> datetime:
        return datetime.strptime(state["at"], "%Y-%m-%dT%H:%M:%SZ")

    starts = [at(r["states"][0]) for r in reports.values()]
    ends = [at(r["states"][0]) + timedelta(seconds=r["seconds"]) for r in reports.values()]
    return (max(ends) - min(starts)).total_seconds()


def run(nodes: int, max_parallel: int, max_unavailable: str) -> None:
    gcu_nodes = [f"gcu-node-{i:03d}" for i in range(1, nodes + 1)]
    node_specs = [(n, GCU_NODE_LABELS, GCUS) for n in gcu_nodes] + [("cpu-node-1", {})]
    gcu_pods, ordinary = nodes // 2, nodes
    with tempfile.TemporaryDirectory() as workdir, local_servers(Path(workdir), node_specs) as (cluster, dockerd):
        stack, _ = prepare_stack(Path(workdir), cluster, dockerd, name="bench-driver")
        stack.remove_config("gcu-stack:blueprint")
        set_json_config(stack, "driverUpgrade", {"maxParallel": max_parallel, "maxUnavailable": max_unavailable})
        # The same per-node check for both methods: capacity only (kwok runs no workload pods for real).
        set_json_config(stack, "validation", {"workload": False})
        results = {}
        for method in ("gcu-stack rolling upgrade", "gcu-upgrade-manager (destroy + up)"):
            set_json_config(stack, "spec", spec("1.0"))
            stack.up(on_output=lambda _: None)
            cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": workloads(gcu_pods, ordinary)}))
            wait_workloads(cluster, gcu_pods, ordinary)
            set_json_config(stack, "spec", spec("2.0"))
            with Watch(cluster, gcu_nodes) as watch:
                started = time.perf_counter()
                if method.startswith("gcu-stack"):
                    reports = stack.up(on_output=lambda _: None).outputs["driverUpgrade"].value["reports"]
                else:
                    stack.destroy(on_output=lambda _: None)
                    stack.up(on_output=lambda _: None)
                seconds = time.perf_counter() - started
            results[method] = figures(watch, seconds)
            if method.startswith("gcu-stack"):
                wait_workloads(cluster, gcu_pods, ordinary)
                set_json_config(stack, "spec", spec("2.0", imagePullPolicy="Always"))
                drivers_before, jobs_on = driver_uids(cluster), job_nodes(cluster)
                with Watch(cluster, gcu_nodes) as watch:
                    started = time.perf_counter()
                    stack.up(on_output=lambda _: None)
                    seconds = time.perf_counter() - started
                cosmetic = figures(watch, seconds)
                drivers_after = driver_uids(cluster)
                replaced = {n for n, uid in drivers_before.items() if drivers_after.get(n) != uid}
                cosmetic.update(replaced=len(replaced), under_job=len(replaced & jobs_on & job_nodes(cluster)))
            cluster.kubectl("delete", "deployment", "training", "web", "-n", "default", "--wait=true")
            stack.destroy(on_output=lambda _: None)
    ours, theirs = results.values()
    print(f"driver 1.0 -> 2.0 on {nodes} simulated GCU nodes, {gcu_pods} GCU pods (1 GCU each), {ordinary} ordinary pods;")
    print(f"gcu-stack: maxParallel {max_parallel}, maxUnavailable {max_unavailable}; validation: capacity per node")
    print(f"  {'':38s} {'wall s':>7s} {'most unavail.':>14s} {'GCU pod disrupt.':>17s} {'moved twice':>12s} {'driver pulled':>14s} "
          f"{'other pods':>11s} {'no plugin node·s':>17s}")
    for name, r in results.items():
        print(f"  {name:38s} {r['seconds']:7.1f} {r['most_unavailable']:14d} {r['gcu_disturbed']:17d} {r['moved_twice']:12d} "
              f"{r['driver_pulled']:14d} {r['web_disturbed']:11d} {r['plugin_down']:17.0f}")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b else ("0" if not a else "inf")

    print(f"  ratios gcu-stack / gcu-upgrade-manager: GCU pod disruptions {ratio(ours['gcu_disturbed'], theirs['gcu_disturbed'])}, "
          f"driver pulled under a job {ratio(ours['driver_pulled'], theirs['driver_pulled'])}, "
          f"device-plugin downtime {ratio(ours['plugin_down'], theirs['plugin_down'])}, wall time {ratio(ours['seconds'], theirs['seconds'])}, "
          f"most nodes unavailable {ratio(ours['most_unavailable'], theirs['most_unavailable'])}")
    steps, per_node = step_seconds(reports)
    print(f"  where a rolling node's time goes (mean over {len(reports)} nodes, {per_node:.1f} s each; a state lasts until the "
          f"next): " + ", ".join(f"{state} {seconds:.1f} s" for state, seconds in steps.items()))
    print(f"  the rollout itself (first node's start to last node's end, ±1 s): {rollout_span(reports):.0f} s of the rolling "
          f"up's {ours['seconds']:.1f} s")
    print("then a change to nothing the driver installs (driver imagePullPolicy IfNotPresent -> Always), gcu-stack restart-only path:")
    print(f"  wall {cosmetic['seconds']:.1f} s; most nodes cordoned {cosmetic['most_cordoned']}; GCU pods evicted or deleted "
          f"{cosmetic['gcu_ended']}; other pods {cosmetic['web_disturbed']}; driver pods replaced {cosmetic['replaced']}, "
          f"{cosmetic['under_job']} of them under a running job (module kept loaded); no plugin node·s {cosmetic['plugin_down']:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--max-parallel", type=int, default=10)
    parser.add_argument("--max-unavailable", default="10%")
    args = parser.parse_args()
    run(args.nodes, args.max_parallel, args.max_unavailable)


if __name__ == "__main__":
    main()
