"""Renaming every component through `pulumi up` on the real engine, watching the pods while it runs.

A rename replaces the component's objects. The program declares workloads, NodePort Services
and Helm releases delete-before-replace, and pulumi-kubernetes deletes with foreground
propagation, so the old DaemonSet's pods are gone before the new DaemonSet exists: no node
ever runs two copies of an agent, and a node port moves from the old Service to the new one.

A thread watches every gcu-stack pod during each `up` (a Kubernetes watch, so no state is
missed between polls) and records every moment two pods of one agent share a node, or two
pods of one Deployment exist at once. Real kube-apiserver, controller manager and
scheduler; kwok-simulated nodes; the real Pulumi engine and provider.
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from engine import GCU_NODE_LABELS, engine_stack, outputs, set_json_config, up_converged
from harness import seed_spec
from pulumi import automation as auto

from components.providers.cluster import core_api

# Outside CI's time budget: scripts/test-extended.sh runs this module (tests/conftest.py EXTENDED).
pytestmark = pytest.mark.extended

# The GCU nodes advertise both GCU resources, as the device plugin or the GCU-share plugin would
# (post-deploy validation looks for the one the deployed plugin advertises).
GCU = {"capacity": {"enflame.com/gcu": "8", "enflame.com/gcu-memory": "64"}}
NODES = [
    ("gcu-node-1", GCU_NODE_LABELS, GCU),
    ("gcu-node-2", GCU_NODE_LABELS, GCU),
    ("cpu-node-1", {}),
]
PASSWORD = "n9e-Db-rename-pw"
PART_OF = "app.kubernetes.io/part-of=gcu-stack"
NIGHTINGALE_PARTS = ("agentd", "mysql", "nserver", "nwebapi", "prometheus", "redis")
# Volcano's chart as this test ships it: what matters for a rename is a fixed-name object two
# releases cannot share (upstream's chart has one: its admission Secret) and one scheduler.
CHART = {
    "Chart.yaml": "apiVersion: v2\nname: volcano\nversion: 1.9.0\n",
    "values.yaml": (
        "basic:\n  image_registry: docker.io\n  image_tag_version: v1.9.0\n  image_pull_policy: IfNotPresent\n"
        "  controller_image_name: volcanosh/vc-controller-manager\n  admission_image_name: volcanosh/vc-webhook-manager\n"
        "  scheduler_image_name: volcanosh/vc-scheduler\n"
    ),
    "templates/admission-secret.yaml": (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: volcano-admission-secret\n  namespace: {{ .Release.Namespace }}\n"
        "type: Opaque\nstringData:\n  release: {{ .Release.Name }}\n"
    ),
    "templates/scheduler.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-scheduler\n"
        "  namespace: {{ .Release.Namespace }}\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n"
        "      app: volcano-scheduler\n  template:\n    metadata:\n      labels:\n        app: volcano-scheduler\n"
        "        app.kubernetes.io/part-of: gcu-stack\n        app.kubernetes.io/component: volcano\n"
        "    spec:\n      containers:\n        - name: volcano-scheduler\n"
        "          image: {{ .Values.basic.image_registry }}/{{ .Values.basic.scheduler_image_name }}:{{ .Values.basic.image_tag_version }}\n"
        "          imagePullPolicy: {{ .Values.basic.image_pull_policy }}\n"
    ),
    "templates/admission-service.yaml": (
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}-admission-service\n"
        "  namespace: {{ .Release.Namespace }}\nspec:\n  selector:\n    app: volcano-admission\n  ports:\n    - port: 443\n"
    ),
}


def write_chart(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in CHART.items():
            data = text.encode()
            info = tarfile.TarInfo(f"volcano/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def every_component(spec: dict) -> dict:
    """The seed with the driver, the scheduler extender, Nightingale and Volcano deployed too."""
    spec["driver"]["notDeploy"] = False
    spec["gcushareScheduler"]["notDeploy"] = False
    spec["nightingale"] = {"notDeploy": False, "namespace": "enflame", "mysql-pv": {"name": "mysql-pv", "hostpath": "/var/lib/gcu-rename/mysql"}}
    spec["volcano"] = {"notDeploy": False, "repository": "docker.io/volcanosh", "version": "v1.9.0"}
    return spec


def renamed(spec: dict, keys: list[str]) -> dict:
    spec = json.loads(json.dumps(spec))
    for key in keys:
        if key == "nightingale":
            spec[key]["name"] = "nightingale-v2"
            for part in NIGHTINGALE_PARTS:
                spec[key][f"{part}-deploy"] = {"name": f"{part}-v2"}
            spec[key]["mysql-pv"]["name"] = "mysql-pv-v2"
            spec[key]["mysql-pvc"] = {"name": "mysql-pvc-v2"}
        elif key == "volcano":
            spec[key]["name"] = "volcano-v2"
        else:
            spec[key]["name"] = f"{spec[key].get('name') or key}-v2"
    return spec


class PodWatch:
    """Every gcu-stack pod, from a Kubernetes watch; records each moment one agent runs twice on a node."""

    def __init__(self, kubeconfig: str):
        self.api = core_api(kubeconfig, None)
        self.pods: dict[str, tuple] = {}  # uid -> key
        self.events: Counter = Counter()  # (event type, component)
        self.overlaps: list[str] = []
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._listed = threading.Event()  # the first list is in: from here on no change is missed
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    @staticmethod
    def key(pod) -> tuple:
        """(component, containers, node): an agent's pod and a step's one-shot pod per node; node '*' for
        a Deployment's (one copy cluster-wide)."""
        labels = pod.metadata.labels or {}
        containers = tuple(sorted(c.name for c in pod.spec.containers))
        owners = [o.kind for o in pod.metadata.owner_references or []]
        node = "*" if "ReplicaSet" in owners else (pod.spec.node_name or _affinity_node(pod))
        return labels.get("app.kubernetes.io/component"), containers, node

    def _record(self, kind: str, pod) -> None:
        uid, key = pod.metadata.uid, self.key(pod)
        self.events[(kind, key[0])] += 1
        if kind == "DELETED":
            self.pods.pop(uid, None)
            return
        self.pods[uid] = key
        self.seen.add(pod.metadata.name)
        copies = [u for u, k in self.pods.items() if k == key]
        if len(copies) > 1:
            self.overlaps.append(f"{time.strftime('%H:%M:%S')} {key}: {len(copies)} pods at once ({pod.metadata.name} {kind})")

    def _run(self) -> None:
        from kubernetes import watch

        try:
            listed = self.api.list_pod_for_all_namespaces(label_selector=PART_OF)
            for pod in listed.items:
                self._record("LISTED", pod)
            version = listed.metadata.resource_version
            self._listed.set()
            while not self._stop.is_set():
                stream = watch.Watch()
                for event in stream.stream(
                    self.api.list_pod_for_all_namespaces, label_selector=PART_OF, resource_version=version, timeout_seconds=2
                ):
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    self._record(event["type"], pod)
                    if self._stop.is_set():
                        stream.stop()
                        break
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def __enter__(self) -> "PodWatch":
        self._thread.start()
        while not self._listed.wait(0.1):
            if not self._thread.is_alive():
                raise AssertionError(f"the pod watch failed before its first list: {self.error!r}")
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(2)  # the last deletions and creations of the run
        self._stop.set()
        self._thread.join(timeout=10)
        if self.error is not None:
            raise self.error


def _affinity_node(pod) -> str:
    affinity = pod.spec.affinity
    terms = affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms if affinity and affinity.node_affinity else []
    for term in terms:
        for field in term.match_fields or []:
            if field.key == "metadata.name":
                return field.values[0]
    return "?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e-renames")
    with engine_stack(root, NODES, "renames", check_destroy=True) as engine:
        engine.stack.remove_config("gcu-stack:blueprint")
        engine.stack.set_config("gcu-stack:nightingaleDbPassword", auto.ConfigValue(PASSWORD, secret=True))
        chart = write_chart(root / "volcano-1.9.0.tgz")
        set_json_config(engine.stack, "volcanoChart", {"path": str(chart), "timeoutSeconds": 120})
        yield engine.stack, engine.cluster


def up(stack: auto.Stack, spec: dict) -> dict:
    set_json_config(stack, "spec", spec)
    result = up_converged(stack)
    out = outputs(stack)
    assert out["phase"] == "Running", [(s["name"], s["status"]) for s in out["resourceStatuses"]]
    return result.summary.resource_changes


def names(cluster, kind: str, namespace: str) -> set[str]:
    listed = json.loads(cluster.kubectl("get", kind, "-n", namespace, "-l", PART_OF, "-o", "json").stdout)["items"]
    return {o["metadata"]["name"] for o in listed}


def node_ports(cluster) -> dict[str, int]:
    listed = json.loads(cluster.kubectl("get", "services", "-A", "-o", "json").stdout)["items"]
    return {
        o["metadata"]["name"]: p["nodePort"]
        for o in listed
        if o["spec"].get("type") == "NodePort"
        for p in o["spec"]["ports"]
    }


def test_renaming_every_component_goes_through_and_never_runs_an_agent_twice(stack):
    stack, cluster = stack
    first = every_component(seed_spec())
    started = time.monotonic()
    up(stack, first)
    deployed = time.monotonic() - started
    assert node_ports(cluster) == {"enflame-gcu-exporter": 30940, "nwebapi": 30018, "gcushare-scheduler-extender": 32766}

    keys = ["nfd", "driver", "toolkit", "devicePlugin", "exporter", "gfd", "gcushareScheduler", "nightingale", "volcano"]
    second = renamed(first, keys)
    # The operator's preview of the renames goes through: every rename is a replacement, and no renamed NodePort
    # Service is dry-run created while the old one still holds its port.
    set_json_config(stack, "spec", second)
    preview = stack.preview(on_output=lambda _: None)
    assert preview.change_summary.get("replace", 0) >= len(keys), preview.change_summary
    started = time.monotonic()
    with PodWatch(cluster.kubeconfig) as watch:
        changes = up(stack, second)
    took = time.monotonic() - started
    assert watch.overlaps == [], "\n".join(watch.overlaps)
    # The watch saw the old pods go and the new ones come, for every component.
    for component in keys:
        assert watch.events[("DELETED", component)] >= 1 and watch.events[("ADDED", component)] >= 1, (component, watch.events)
    assert changes.get("replace", 0) >= len(keys), changes
    assert node_ports(cluster) == {"enflame-gcu-exporter-v2": 30940, "nwebapi-v2": 30018, "gcushare-scheduler-extender-v2": 32766}
    assert names(cluster, "daemonsets", "kube-system") == {
        "enflame-node-feature-discovery-v2", "enflame-gcu-driver-v2", "enflame-gcu-docker-plugin-v2",
        "enflame-gcu-k8s-plugin-v2", "enflame-gcu-exporter-v2", "enflame-gcu-feature-discovery-v2",
    }
    assert names(cluster, "deployments", "enflame") == {f"{p}-v2" for p in NIGHTINGALE_PARTS}
    claim = json.loads(cluster.kubectl("get", "pvc", "mysql-pvc-v2", "-n", "enflame", "-o", "json").stdout)
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == "mysql-pv-v2"
    volcano = json.loads(cluster.kubectl("get", "deployments", "-n", "volcano-system", "-o", "json").stdout)["items"]
    assert [d["metadata"]["name"] for d in volcano] == ["volcano-v2-scheduler"]
    print(f"\ndeploy of every component: {deployed:.0f}s; renaming all of them: {took:.0f}s; changes {changes}")

    # GCU-share instead of the device plugin, then its rename.
    third = json.loads(json.dumps(second))
    third["devicePlugin"]["notDeploy"] = True
    third["gcusharePlugin"]["notDeploy"] = False
    up(stack, third)
    with PodWatch(cluster.kubeconfig) as watch:
        up(stack, renamed(third, ["gcusharePlugin"]))
    assert watch.overlaps == [], "\n".join(watch.overlaps)
    assert watch.events[("DELETED", "gcusharePlugin")] >= 1 and watch.events[("ADDED", "gcusharePlugin")] >= 1
    assert "gcushare-device-plugin-v2" in names(cluster, "daemonsets", "kube-system")
