"""Post-deploy validation (components/providers/node_validation.py) against a real kube-apiserver,
controller manager and scheduler with kwok-simulated nodes. Never skipped.

The tests play the kubelet's part where kwok does not: a node's allocatable (as a device
plugin would advertise it), and the pods of a node kwok does not manage (to make a
validation pod fail or hang). kwok completes the pods of Jobs, which is what the
validation's workload is.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import kubernetes_validate
import pytest
from k8s_schema import KUBERNETES_VERSION
from realservers import PROJECT_DIR, AuditLog

from components.providers import node_validation as v
from components.providers.cluster import core_api, identify

PRESENT = "enflame.com/gcu.present"
GCU = "enflame.com/gcu"
FOUR = {GCU: "4"}
NS = "kube-system"
NODES = [
    ("gcu-node-1", {PRESENT: "true"}, {"capacity": FOUR}),
    ("gcu-node-2", {PRESENT: "true"}, {"capacity": FOUR}),
    ("gcu-node-3", {PRESENT: "true"}),  # its device plugin never advertises anything
    ("gcu-late", {PRESENT: "true"}),  # advertises a few seconds into the validation
    ("gcu-cd-1", {PRESENT: "true"}, {"capacity": FOUR, "runtime": "containerd://1.6.20"}),
    ("gcu-busy", {PRESENT: "true"}, {"capacity": {GCU: "1"}}),
    ("gcu-cordoned", {PRESENT: "true"}, {"capacity": FOUR}),
    ("cpu-node-1", {}),
]
MANUAL = "gcu-manual"  # no kwok: its pods do only what a test makes them do
SELFCHECK = PROJECT_DIR / "images" / "toolkit" / "gcu-selfcheck.sh"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from devtools.localcluster import LocalCluster

    with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=NODES) as running:
        running.kubectl("cordon", "gcu-cordoned")
        running.api.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": MANUAL, "labels": {PRESENT: "true"}}})
        yield running


@pytest.fixture
def api(cluster):
    return core_api(cluster.kubeconfig, None)


def settings(**changes) -> v.CheckSettings:
    base = dict(image="registry.local/gcu/gcu-runtime:1.0", timeout_seconds=5, workload_timeout_seconds=30,
                poll_seconds=0.3, instance="test-validation", plugin_namespace=NS,
                plugin_pod_labels=(("app.kubernetes.io/name", "enflame-gcu-k8s-plugin"),), plugin_name="enflame-gcu-k8s-plugin")
    base.update(changes)
    return v.CheckSettings(**base)


def leftovers(cluster) -> list[str]:
    """Validation Jobs and pods anywhere in the cluster."""
    out = cluster.kubectl("get", "jobs,pods", "--all-namespaces", "-l", "app.kubernetes.io/component=validation", "-o", "name")
    return out.stdout.split()


def manual_node_ready(cluster, allocatable=FOUR) -> None:
    """Play the kubelet of the manual node: Ready now, with these GCUs."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", **allocatable}
    cluster.api.patch(f"/api/v1/nodes/{MANUAL}/status", {"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "nodeInfo": {"containerRuntimeVersion": "docker://20.10.24"},
    }})


def pods_on(cluster, node: str) -> list[dict]:
    found = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-l", "app.kubernetes.io/component=validation", "-o", "json").stdout)
    return [p for p in found["items"] if p["spec"].get("nodeName") == node]


class PodWatch:
    """Every validation pod created while the block runs (they live for a second or so)."""

    def __init__(self, api):
        self.api, self.seen, self.stop, self.opened = api, [], threading.Event(), threading.Event()

    def _run(self):
        from kubernetes import watch

        version = self.api.list_namespaced_pod(NS, limit=1).metadata.resource_version
        while not self.stop.is_set():
            self.opened.set()
            for event in watch.Watch().stream(self.api.list_namespaced_pod, NS, resource_version=version, timeout_seconds=1,
                                              label_selector="app.kubernetes.io/component=validation"):
                version = event["object"].metadata.resource_version
                if event["type"] == "ADDED":
                    self.seen.append(event["object"])

    def __enter__(self):
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.opened.wait(10)
        return self.seen

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def job_creates(audit) -> int:
    return sum(1 for e in audit.events("jobs", user="admin") if e.get("verb") == "create")


# ---------------------------------------------------------------------------- pure parts


def test_the_job_is_valid_pinned_through_the_scheduler_and_asks_for_one_gcu():
    manifest = v.job_manifest("gcu-node-7", settings(), "run1", "enflame")
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    spec = manifest["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 60 and spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert "nodeName" not in pod  # the scheduler must find the GCU
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gcu-node-7"]}]}
    assert pod["restartPolicy"] == "Never" and pod["runtimeClassName"] == "enflame"
    assert pod["tolerations"] == [{"operator": "Exists"}]  # a cordoned node (driver upgrade) too
    (container,) = pod["containers"]
    assert container["command"] == ["/usr/local/bin/gcu-selfcheck"]
    assert container["resources"]["limits"][GCU] == container["resources"]["requests"][GCU] == "1"
    assert len(manifest["metadata"]["name"]) <= 63
    assert v.job_manifest("n" * 253, settings(), "run1", None)["metadata"]["name"].startswith("gcu-validate-nnn")


def test_docker_nodes_get_no_runtime_class_other_runtimes_the_setting():
    docker = {"status": {"nodeInfo": {"containerRuntimeVersion": "docker://20.10.24"}}}
    containerd = {"status": {"nodeInfo": {"containerRuntimeVersion": "containerd://1.6.20"}}}
    assert v.runtime_class_for(docker, settings()) is None
    assert v.runtime_class_for(containerd, settings()) == "enflame"
    assert v.runtime_class_for(containerd, settings(runtime_class_name="")) is None


def node(name, allocatable=None, ready="True", labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {
        "allocatable": allocatable or {}, "capacity": allocatable or {},
        "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady" if ready != "True" else "KubeletReady"}]}}


def test_capacity_problems_say_what_is_missing():
    assert v.capacity_problem(node("a", FOUR), GCU) is None
    assert v.capacity_problem(node("a"), GCU) == "no enflame.com/gcu in allocatable"
    assert v.capacity_problem(node("a", {GCU: "0"}), GCU) == "enflame.com/gcu is 0 in allocatable (capacity 0)"
    assert v.capacity_problem(node("a", FOUR, ready="False"), GCU).startswith("node is not Ready (KubeletNotReady")
    assert v.capacity_problem(None, GCU) == "node not found"
    assert v.capacity_failure("gcu-node-3", "no enflame.com/gcu in allocatable", 120, settings()) == (
        "gcu-node-3: no enflame.com/gcu in allocatable after 120 s — is the device plugin running there?"
    )


def test_coverage_follows_the_plugin_placement_and_the_opt_out_labels():
    live = {
        "a": node("a", labels={PRESENT: "true"}),
        "b": node("b", labels={PRESENT: "true", "enflame.com/gcu.deploy.devicePlugin": "false"}),
        "c": node("c", labels={PRESENT: "true", "enflame.com/gcu.deploy.operands": "false"}),
        "d": node("d", labels={}),
        "e": node("e", labels={PRESENT: "true", "enflame.com/gcu.deploy.exporter": "false"}),
    }
    covered, skipped = v.coverage(["a", "b", "c", "d", "e", "gone"], live, "devicePlugin", {PRESENT: "true"}, [])
    assert covered == ["a", "e"]  # another agent's opt-out is not the plugin's
    assert skipped == {
        "b": "opted out (enflame.com/gcu.deploy.devicePlugin=false)",
        "c": "opted out (enflame.com/gcu.deploy.operands=false)",
        "d": "not selected by the device plugin's nodeSelector (enflame.com/gcu.present=true)",
        "gone": "no longer exists",
    }
    covered, skipped = v.coverage(["a", "e"], live, "gcusharePlugin", {PRESENT: "true"}, ["e"], "the GCU-share device plugin")
    assert covered == ["e"] and skipped == {"a": "not one of the GCU-share device plugin's nodes"}


def pod(phase, node_name="n", **status):
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node_name}, "status": {"phase": phase, **status}}


def test_workload_outcomes():
    s = settings(workload_timeout_seconds=30, busy_seconds=10)
    assert v.workload_outcome("n", None, [pod("Succeeded")], s, 1) == ("passed", "")
    failed = pod("Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "no GCU device file"}}}])
    assert v.workload_outcome("n", None, [failed], s, 1) == ("failed", "n: the validation pod p failed (exit code 1, Error): no GCU device file")
    missing = pod("Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 127, "reason": "StartError"}}}])
    assert "does the image have /usr/local/bin/gcu-selfcheck?" in v.workload_outcome("n", None, [missing], s, 1)[1]
    assert v.workload_outcome("n", None, [pod("Running")], s, 5) is None
    assert v.workload_outcome("n", None, [pod("Running")], s, 30) == ("failed", "n: the validation pod p did not finish in 30 s")
    bad_image = pod("Pending", containerStatuses=[{"state": {"waiting": {"reason": "InvalidImageName", "message": "bad"}}}])
    assert v.workload_outcome("n", None, [bad_image], s, 1) == ("failed", "n: the validation pod p cannot start (InvalidImageName: bad)")
    unscheduled = {"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available: 1 Insufficient enflame.com/gcu."}]}}
    assert v.workload_outcome("n", None, [unscheduled], s, 5) is None
    assert v.workload_outcome("n", None, [unscheduled], s, 10)[0] == "busy"
    taint = json.loads(json.dumps(unscheduled))
    taint["status"]["conditions"][0]["message"] = "0/3 nodes are available: 1 node(s) had untolerated taint."
    assert v.workload_outcome("n", None, [taint], s, 30)[1].startswith("n: the validation pod was not scheduled in 30 s: 0/3")
    assert v.workload_outcome("n", None, [], s, 30) == ("failed", "n: no validation pod was created in 30 s")


# ---------------------------------------------------------------------------- the self-check script


@pytest.mark.parametrize("shell", ["sh", "dash", "busybox"])
def test_self_check_lists_the_device_files_and_fails_without_any(shell, tmp_path):
    from devtools import CACHE_DIR

    if shell == "dash":
        dash = shutil.which("dash")
        assert dash, "dash is not installed: this case would only test sh again"
        argv = [dash]
    else:
        argv = {"sh": ["sh"], "busybox": [str(next(Path(CACHE_DIR).glob("busybox-*/busybox"), Path("/usr/bin/busybox"))), "sh"]}[shell]
    assert Path(argv[0]).exists() or shutil.which(argv[0]), argv
    # /dev/null is a character device on every machine: a stand-in for a GCU's device file.
    given = subprocess.run([*argv, str(SELFCHECK)], env={"GCU_DEVICE_GLOB": "/dev/nul[l]", "NODE_NAME": "gcu-node-1", "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True)
    assert given.returncode == 0, given.stderr
    assert given.stdout.splitlines() == ["gcu-selfcheck: /dev/null", "gcu-selfcheck: 1 GCU device file(s) on gcu-node-1"]
    (tmp_path / "gcu0").write_text("a regular file is not a device")
    none = subprocess.run([*argv, str(SELFCHECK)], env={"GCU_DEVICE_GLOB": f"{tmp_path}/gcu[0-9]*", "NODE_NAME": "gcu-node-1", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    assert none.returncode == 1 and none.stdout == ""
    assert "gcu-selfcheck: no GCU device file" in none.stderr and "gcu-node-1" in none.stderr


def test_the_built_toolkit_image_runs_the_self_check_as_the_validation_pod_does(tmp_path):
    """A real `docker build` of the toolkit image (stand-in package), then the pod's command in it,
    with a device standing in for the GCU the device plugin would give, and without one."""
    from components.images import ImagesOptions, build_spec, check_images
    from devtools import imagebuild
    from devtools.rootfs import import_base_image, rootfs_tarball

    with imagebuild.build_daemon(tmp_path / "dockerd") as daemon:
        import_base_image(daemon, rootfs_tarball(), imagebuild.BASE_IMAGE)
        project = tmp_path / "project"
        options = ImagesOptions.model_validate(
            {"packageDir": "packages", "network": "none", "toolkit": {"build": True, "baseImage": imagebuild.BASE_IMAGE}}
        )
        imagebuild.write_standins(options.package_path(project), ["toolkit"], padded=False)
        spec = build_spec("toolkit", options, check_images(options, None, project)["toolkit"], project)
        imagebuild.docker_build(daemon, spec)
        command = v.CheckSettings().command  # what the pod runs: the image's entrypoint is not used

        def run(*options):
            return daemon.docker("run", "--rm", "--network", "none", "-e", "NODE_NAME=gcu-node-1", *options,
                                 "--entrypoint", command[0], spec.image_name, *command[1:], check=False)

        given = run("--device", "/dev/null:/dev/gcu0")
        assert given.returncode == 0, given.stderr
        assert given.stdout.splitlines() == ["gcu-selfcheck: /dev/gcu0", "gcu-selfcheck: 1 GCU device file(s) on gcu-node-1"]
        none = run()
        assert none.returncode == 1 and "no GCU device file (/dev/gcu[0-9]*) in this container on gcu-node-1" in none.stderr


# ---------------------------------------------------------------------------- against the API server


def test_nodes_advertising_the_resource_pass_and_the_workload_runs_on_each_then_nothing_is_left(cluster, api):
    audit = AuditLog(cluster)
    audit.mark()
    results = v.validate_nodes(api, ["gcu-node-2", "gcu-node-1"], settings())
    assert [(r.node, r.passed, r.allocatable, r.workload, r.message) for r in results] == [
        ("gcu-node-1", True, "4", "passed", ""), ("gcu-node-2", True, "4", "passed", ""),
    ]
    assert job_creates(audit) == 2
    assert leftovers(cluster) == []


def test_a_node_that_never_advertises_fails_naming_it_and_whether_the_plugin_runs_there(cluster, api):
    began = time.monotonic()
    (result,) = v.validate_nodes(api, ["gcu-node-3"], settings(timeout_seconds=3))
    assert 3 <= time.monotonic() - began < 15
    assert not result.passed and result.workload == "not run"
    assert result.message == (
        "gcu-node-3: no enflame.com/gcu in allocatable after 3 s — is the device plugin running there? "
        "(no enflame-gcu-k8s-plugin pod on gcu-node-3)"
    )
    assert leftovers(cluster) == []


def test_validation_waits_for_a_node_to_advertise_its_gcus(cluster, api):
    def kubelet():
        time.sleep(2)
        cluster.set_node_status("gcu-late", allocatable=FOUR, capacity=FOUR)

    player = threading.Thread(target=kubelet)
    player.start()
    try:
        (result,) = v.validate_nodes(api, ["gcu-late"], settings(timeout_seconds=30))
    finally:
        player.join()
    assert result.passed and result.workload == "passed" and result.allocatable == "4"
    assert 2 <= result.seconds < 30


def test_validate_node_is_the_check_of_one_node_and_works_on_a_cordoned_node(cluster, api):
    # The driver upgrade validates a node before it uncordons it.
    result = v.validate_node(api, "gcu-cordoned", settings())
    assert result.passed and result.workload == "passed"
    assert leftovers(cluster) == []


def test_a_sample_runs_the_workload_on_that_many_nodes_only(cluster, api):
    audit = AuditLog(cluster)
    audit.mark()
    results = v.validate_nodes(api, ["gcu-node-1", "gcu-node-2", "gcu-cordoned"], settings(), sample=1)
    assert all(r.passed for r in results)
    assert sorted(r.workload for r in results) == ["not sampled", "not sampled", "passed"]
    assert job_creates(audit) == 1
    assert leftovers(cluster) == []


def test_workload_off_checks_capacity_only(cluster, api):
    audit = AuditLog(cluster)
    audit.mark()
    (result,) = v.validate_nodes(api, ["gcu-node-1"], settings(workload=False))
    assert result.passed and result.workload == "off"
    assert job_creates(audit) == 0


def test_containerd_nodes_use_the_runtime_class_and_its_absence_is_a_failure(cluster, api):
    (missing,) = v.validate_nodes(api, ["gcu-cd-1"], settings())
    assert not missing.passed and missing.workload == "failed"
    assert missing.message.startswith("gcu-cd-1: RuntimeClass enflame does not exist") and "containerd://1.6.20" in missing.message
    cluster.api.post("/apis/node.k8s.io/v1/runtimeclasses", {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                            "metadata": {"name": "enflame"}, "handler": "enflame"})
    with PodWatch(api) as seen:  # what the Job's pod asked for
        (result,) = v.validate_nodes(api, ["gcu-cd-1"], settings())
    cluster.kubectl("delete", "runtimeclass", "enflame")
    assert result.passed and result.workload == "passed"
    assert [p.spec.runtime_class_name for p in seen] == ["enflame"]
    assert leftovers(cluster) == []


def test_every_gcu_taken_by_other_pods_is_busy_not_broken(cluster, api):
    holder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holds-the-gcu", "namespace": "default"},
              "spec": {"nodeName": "gcu-busy", "containers": [{"name": "c", "image": "x", "resources": {"limits": {GCU: "1"}}}]}}
    cluster.api.post("/api/v1/namespaces/default/pods", holder)
    try:
        (result,) = v.validate_nodes(api, ["gcu-busy"], settings(busy_seconds=2))
    finally:
        cluster.kubectl("delete", "pod", "holds-the-gcu", "-n", "default", "--grace-period=0", "--force")
    assert result.passed and result.workload == "busy"
    assert result.message == "gcu-busy: every enflame.com/gcu is in use by other pods, the workload was not run"
    assert leftovers(cluster) == []


def fail_pod_when_it_lands(cluster, exit_code=1, seconds=30):
    """Play the manual node's kubelet: the validation pod's container exits with `exit_code`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for found in pods_on(cluster, MANUAL):
            name = found["metadata"]["name"]
            now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            cluster.api.patch(f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": {
                "phase": "Failed",
                "containerStatuses": [{"name": v.CONTAINER, "image": "registry.local/gcu/gcu-runtime:1.0", "imageID": "", "ready": False,
                                       "restartCount": 0, "state": {"terminated": {"exitCode": exit_code, "reason": "Error",
                                                                                   "startedAt": now, "finishedAt": now}}}],
            }})
            return
        time.sleep(0.1)


def test_a_failing_workload_pod_fails_the_node_and_is_removed(cluster, api):
    manual_node_ready(cluster)
    player = threading.Thread(target=fail_pod_when_it_lands, args=(cluster,))
    player.start()
    try:
        (result,) = v.validate_nodes(api, [MANUAL], settings())
    finally:
        player.join()
    assert not result.passed and result.workload == "failed" and result.capacity_ok
    assert result.message.startswith(f"{MANUAL}: the validation pod gcu-validate-gcu-manual-")
    assert "failed (exit code 1, Error)" in result.message
    assert leftovers(cluster) == []


def test_a_workload_pod_that_never_finishes_times_out_and_is_removed(cluster, api):
    manual_node_ready(cluster)  # nothing runs the pod there: it stays Pending on the node
    began = time.monotonic()
    (result,) = v.validate_nodes(api, [MANUAL], settings(workload_timeout_seconds=3))
    assert time.monotonic() - began < 30
    assert not result.passed and result.workload == "failed"
    assert "did not start in 3 s (still Pending on the node)" in result.message
    assert leftovers(cluster) == []


def test_an_exception_midway_still_removes_the_pods(cluster, api, monkeypatch):
    manual_node_ready(cluster)
    real = v._poll_jobs

    def poll_then_break(*args, **kwargs):
        real(*args, **kwargs)
        if pods_on(cluster, MANUAL):
            raise RuntimeError("the connection broke")

    monkeypatch.setattr(v, "_poll_jobs", poll_then_break)
    with pytest.raises(RuntimeError, match="the connection broke"):
        v.validate_nodes(api, [MANUAL], settings(workload_timeout_seconds=30))
    assert leftovers(cluster) == []


# ---------------------------------------------------------------------------- the provider


def props(cluster, nodes, **changes) -> dict:
    base = {
        "nodes": nodes, "plugin": "devicePlugin", "pluginName": "enflame-gcu-k8s-plugin", "pluginNamespace": NS,
        "resource": GCU, "nodeSelector": {PRESENT: "true"}, "nodeNames": [], "enabled": True, "mode": "fail",
        "timeoutSeconds": 3, "workload": True, "sampleSize": 0, "parallel": 10, "workloadTimeoutSeconds": 30,
        "image": "registry.local/gcu/gcu-runtime:1.0", "imagePullPolicy": "IfNotPresent", "command": [v.SELFCHECK],
        "runtimeClassName": "enflame", "namespace": NS, "instance": "test-validation", "revision": {}, "trigger": "",
        "kubeconfig": cluster.kubeconfig, "context": None,
        # The stack's recorded cluster: every call checks it (components/providers/cluster.py).
        "clusterUid": identify(core_api(cluster.kubeconfig, None))["uid"],
    }
    base.update(changes)
    assert set(base) == set(v.VALIDATION_INPUTS)
    return base


def test_provider_fail_mode_raises_naming_every_failed_node(cluster):
    with pytest.raises(v.ValidationFailed) as caught:
        v.GcuValidationProvider().create(props(cluster, ["gcu-node-1", "gcu-node-3", "cpu-node-1"]))
    message = str(caught.value)
    assert message.startswith("GCU validation failed on 1 of 2 node(s):\n  gcu-node-3: no enflame.com/gcu in allocatable after 3 s")
    assert "gcu-stack:validation mode to warn" in message
    assert leftovers(cluster) == []


def test_provider_warn_mode_succeeds_and_reports_the_node(cluster):
    nodes = ["gcu-node-1", "gcu-node-3"]
    outs = v.GcuValidationProvider().create(props(cluster, nodes, mode="warn")).outs
    assert outs["passed"] is False
    assert outs["failures"] == ["gcu-node-3: no enflame.com/gcu in allocatable after 3 s — is the device plugin running there? "
                                "(no enflame-gcu-k8s-plugin pod on gcu-node-3)"]
    assert outs["results"]["gcu-node-1"]["passed"] and outs["results"]["gcu-node-1"]["workload"] == "passed"
    assert outs["results"]["gcu-node-3"] == {"passed": False, "capacity": False, "allocatable": None, "workload": "not run",
                                             "message": outs["failures"][0], "seconds": outs["results"]["gcu-node-3"]["seconds"]}
    assert outs["nodes"] == nodes and outs["validatedAt"]
    # Nothing changed: no update, so a second `pulumi up` runs no pod.
    assert not v.GcuValidationProvider().diff("gcu-validation", outs, props(cluster, nodes, mode="warn")).changes


def test_provider_skips_opted_out_nodes_and_says_why(cluster):
    cluster.kubectl("label", "node", "gcu-node-3", "enflame.com/gcu.deploy.operands=false")
    try:
        outs = v.GcuValidationProvider().create(props(cluster, ["gcu-node-1", "gcu-node-3"])).outs
    finally:
        cluster.kubectl("label", "node", "gcu-node-3", "enflame.com/gcu.deploy.operands-")
    assert outs["passed"] is True and list(outs["results"]) == ["gcu-node-1"]
    assert outs["skipped"] == {"gcu-node-3": "opted out (enflame.com/gcu.deploy.operands=false)"}


def test_provider_diff_and_refresh_see_a_node_that_lost_its_gcus(cluster):
    provider = v.GcuValidationProvider()
    news = props(cluster, ["gcu-node-2"], workload=False)
    outs = provider.create(news).outs
    assert outs["passed"] and not provider.diff("gcu-validation", outs, news).changes
    assert provider.diff("gcu-validation", outs, {**news, "trigger": "again"}).changes
    cluster.set_node_status("gcu-node-2", allocatable={GCU: None}, capacity={GCU: None})
    try:
        assert provider.diff("gcu-validation", outs, news).changes  # preview: it will validate again
        refreshed = provider.read("gcu-validation", outs).outs
        assert refreshed["passed"] is False
        assert refreshed["drift"] == [f"gcu-node-2: no enflame.com/gcu in allocatable (it passed validation at {outs['validatedAt']})"]
        assert refreshed["results"]["gcu-node-2"]["message"] == "gcu-node-2: no enflame.com/gcu in allocatable (seen by refresh)"
        with pytest.raises(v.ValidationFailed, match="gcu-node-2: no enflame.com/gcu in allocatable after 3 s"):
            provider.update("gcu-validation", refreshed, news)
    finally:
        cluster.set_node_status("gcu-node-2", allocatable=FOUR, capacity=FOUR)
    assert provider.update("gcu-validation", refreshed, news).outs["passed"] is True


def test_provider_disabled_does_nothing(cluster):
    audit = AuditLog(cluster)
    audit.mark()
    outs = v.GcuValidationProvider().create(props(cluster, ["gcu-node-3"], enabled=False)).outs
    assert outs["passed"] is True and outs["results"] == {}
    assert job_creates(audit) == 0


def test_provider_delete_removes_jobs_a_killed_run_left(cluster, api):
    from kubernetes import client

    orphan = v.job_manifest("gcu-node-1", settings(), "killedrun", None)
    client.BatchV1Api(api.api_client).create_namespaced_job(NS, orphan)
    assert leftovers(cluster)
    v.GcuValidationProvider().delete("gcu-validation", props(cluster, ["gcu-node-1"]))
    assert leftovers(cluster) == []
