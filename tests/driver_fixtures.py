"""Helpers for the driver-upgrade tests (test_driver_upgrade.py, test_engine_driver_upgrade.py) on a real API server.

What a cluster carries besides the stack's objects: GCU jobs with a PodDisruptionBudget and ordinary
pods, applied server-side; whether pods are Ready; which nodes gcu-stack cordoned while a rollout ran.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import timezone

from components.names import DEPLOY_LABEL_PREFIX, PAUSED_FOR_DRIVER_UPGRADE
from components.providers import driver_rollout as du


def apply(cluster, objects: list) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def pods(cluster, selector: str, namespace: str = "default") -> list[dict]:
    return json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]


def uids(cluster, selector: str) -> set:
    return {p["metadata"]["uid"] for p in pods(cluster, selector)}


def wave_order(cluster, nodes: list[str], jobs: str = "app=training") -> list[str]:
    """The order the rollout takes `nodes` in when none is resumed: those without GCU jobs first, by name in each."""
    busy = {p["spec"].get("nodeName") for p in pods(cluster, jobs) if not p["metadata"].get("deletionTimestamp")}
    return sorted(nodes, key=lambda n: (n in busy, n))


def pending_tainted(cluster) -> set:
    """The nodes carrying the rollout's PreferNoSchedule taint."""
    items = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["name"] for n in items
            if any(t.get("key") == du.PENDING_TAINT["key"] for t in n["spec"].get("taints") or [])}


def moved_once(reports: dict, jobs_before: list[str]) -> list[str]:
    """The GCU pods a rollout evicted, checked to be pods that ran before it, each once: no job evicted a second
    time from a node it was moved to."""
    evicted = [pod for report in reports.values() for pod in report["evicted"]]
    assert len(evicted) == len(set(evicted)) and set(evicted) <= {f"default/{j}" for j in jobs_before}, (evicted, jobs_before)
    return evicted


def names(cluster, selector: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods(cluster, selector) if not p["metadata"].get("deletionTimestamp"))


def gcu_job(name: str, replicas: int) -> list[dict]:
    labels = {"app": name}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "nodeSelector": {"enflame.com/gcu.present": "true"},
             "containers": [{"name": "train", "image": "train:1", "resources": {"limits": {"enflame.com/gcu": "1"}}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
         "spec": {"minAvailable": replicas - 1, "selector": {"matchLabels": labels}}},
    ]


def ordinary(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 4, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "containers": [{"name": "web", "image": "web:1"}]}}}}


def all_ready(cluster, selector: str, count: int, namespace: str = "default") -> bool:
    found = [p for p in pods(cluster, selector, namespace) if not p["metadata"].get("deletionTimestamp")]
    return len(found) == count and all(_ready(p) for p in found)


NODE_CONTROLLER_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
AGENTS = ("app.kubernetes.io/name=enflame-gcu-driver", "app.kubernetes.io/name=enflame-gcu-k8s-plugin")


def settled(cluster, nodes: list[str], jobs: str = "training", agents: tuple = AGENTS) -> bool:
    """What a rollout test starts from, whatever the test before it left settling: every node Ready and untainted by
    the node controller, a Ready driver and device plugin pod on each, every pod of the `jobs` Deployment (if any) Ready."""
    items = {n["metadata"]["name"]: n for n in json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]}
    for name in nodes:
        found = items.get(name)
        if found is None or du.not_ready(found) is not None:
            return False
        if any(t.get("key") in NODE_CONTROLLER_TAINTS for t in found["spec"].get("taints") or []):
            return False
    for selector in agents:
        ready_on = {p["spec"].get("nodeName") for p in pods(cluster, selector, "kube-system")
                    if not p["metadata"].get("deletionTimestamp") and _ready(p)}
        if not set(nodes) <= ready_on:
            return False
    deployments = json.loads(cluster.kubectl("get", "deployments", "-n", "default", "-o", "json").stdout)["items"]
    wanted = [d["spec"]["replicas"] for d in deployments if d["metadata"]["name"] == jobs]
    return not wanted or all_ready(cluster, f"app={jobs}", wanted[0])


def wait_settled(cluster, nodes: list[str], agents: tuple = AGENTS) -> None:
    from realnode_fixtures import wait_until

    wait_until(lambda: settled(cluster, nodes, agents=agents), 120,
               what=f"{', '.join(nodes)} Ready, each with a Ready driver and device plugin, the GCU jobs Ready")


def nodes_json(cluster) -> list[dict]:
    return json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


class CordonWatch:
    """What the API server shows while a rollout runs, polled: the most nodes gcu-stack had cordoned at any one time,
    the nodes whose GCU agents were paused, and, given a PodDisruptionBudget's name (in default), the fewest healthy
    pods it counted."""

    def __init__(self, cluster, pdb: str = ""):
        self.cluster, self.pdb, self.most, self.paused, self.fewest_healthy = cluster, pdb, 0, set(), None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            items = nodes_json(self.cluster)
            ours = [n for n in items if (n["metadata"].get("annotations") or {}).get(du.CORDONED_ANNOTATION) == "true"]
            self.most = max(self.most, len(ours))
            self.paused |= {n["metadata"]["name"] for n in items if PAUSED_FOR_DRIVER_UPGRADE in {
                v for k, v in (n["metadata"].get("labels") or {}).items() if k.startswith(DEPLOY_LABEL_PREFIX)}}
            if self.pdb:
                healthy = (json.loads(self.cluster.kubectl("get", "pdb", self.pdb, "-o", "json").stdout).get("status")
                           or {}).get("currentHealthy")
                if healthy is not None:
                    self.fewest_healthy = healthy if self.fewest_healthy is None else min(self.fewest_healthy, healthy)
            time.sleep(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()


class PrepullWatch:
    """The driver's pre-pull pods as a Kubernetes watch sees them while a rollout runs: by node, when its kubelet first
    started a pre-pull container (RFC 3339, as the kubelet reports it), i.e. the node had the new images."""

    def __init__(self, cluster, namespace: str = "kube-system", daemonset: str = "enflame-gcu-driver"):
        from kubernetes import client, watch

        from components.providers.driver_prepull import selector

        self.started: dict[str, str] = {}
        self._core = client.CoreV1Api(cluster.api.client)
        self._new_watch = watch.Watch
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self._args = {"namespace": namespace, "label_selector": selector(daemonset), "timeout_seconds": 60}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        since = None
        while not self._stopped.is_set():   # each watch request ends (its timeout, an API server closing it): reopened
            try:   # from where the last one was, so no change in between is missed
                for event in self._watch.stream(self._core.list_namespaced_pod, **self._args,
                                                 **({"resource_version": since} if since else {})):
                    self._record(event["object"])
                    since = event["object"].metadata.resource_version
            except Exception:  # noqa: BLE001 - reopened
                time.sleep(0.5)
            self._watch = self._new_watch()

    def _record(self, pod) -> None:
        for status in pod.status.container_statuses or []:
            state = status.state
            begun = (state.running and state.running.started_at) or (state.terminated and state.terminated.started_at)
            if begun is not None:
                stamp = begun.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                self.started[pod.spec.node_name] = min(self.started.get(pod.spec.node_name, stamp), stamp)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stopped.set()
        self._watch.stop()


def make_not_ready(cluster, name: str) -> None:
    """The node's kubelet stops: kwok no longer plays it, and the node reports NotReady, as the kubelet would."""
    from devtools.localcluster import KWOK_ANNOTATION

    cluster.kubectl("annotate", "node", name, f"{KWOK_ANNOTATION}-")
    cluster.api.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime is down"}]}})


def make_ready(cluster, name: str) -> None:
    from devtools.localcluster import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE

    cluster.kubectl("annotate", "node", name, f"{KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}", "--overwrite")
    from realnode_fixtures import wait_until

    wait_until(lambda: du.not_ready(json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)) is None, 60,
               what=f"{name} Ready again")


def _children() -> dict[int, list[int]]:
    from devtools.realnode import _all_pids, _ppid  # the project's one reading of /proc/<pid>/stat

    out: dict[int, list[int]] = {}
    for pid in _all_pids():
        out.setdefault(_ppid(pid), []).append(pid)
    return out


def kill_tree(root: int) -> None:
    """SIGKILL `root` and every process under it, as the end of a session does. Killing only the CLI's process group
    is not that: Pulumi starts its plugins in groups of their own, and the dynamic provider goes on acting (a rollout
    went on evicting and uncordoning after such a kill in a rehearsal of 3d1a7a6). Each is stopped first, so none
    leaves the tree (reparented) or adds to it meanwhile."""
    stopped: set[int] = set()
    while True:
        children, tree, todo = _children(), set(), [root]
        while todo:
            pid = todo.pop()
            if pid not in tree:
                tree.add(pid)
                todo += children.get(pid, [])
        new = tree - stopped
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        stopped |= new
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
