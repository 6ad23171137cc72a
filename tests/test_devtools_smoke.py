"""Smoke tests for devtools: a real local control plane with kwok nodes, and a real dockerd.

These start the real servers. A missing binary is a FAILURE (never a skip):
run scripts/toolchain/kube.sh to build/install the toolchain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devtools import KUBERNETES_BUILD_MODULES, ToolchainMissing, go_requirement, kubernetes_version, log_tail  # noqa: E402
from devtools.dockerd import Dockerd, find_binaries  # noqa: E402
from devtools.localcluster import DEFAULT_RUNTIME, ETCD_VERSION, GCU_LABEL, K8S_VERSION, LocalCluster, Toolchain  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _require(fn):
    """Call fn(); a missing binary FAILS the test (never skips)."""
    try:
        return fn()
    except ToolchainMissing as e:
        msg = str(e)
    pytest.fail(msg, pytrace=False)


def wait_for(cond, timeout=60.0, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# --------------------------------------------------------------------------- local cluster

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    _require(Toolchain.find)
    nodes = [
        ("gcu-node-1", {GCU_LABEL: "true"}, {"capacity": {"enflame.com/gcu": "8"}, "runtime": "containerd://1.6.20"}),
        # tainted: only pods tolerating enflame.com/gcu may land here
        ("gcu-node-2", {GCU_LABEL: "true"},
         {"taints": [{"key": "enflame.com/gcu", "value": "true", "effect": "NoSchedule"}]}),
        ("cpu-node-1", {}),
    ]
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=nodes, audit=True)
    t0 = time.monotonic()
    c.start()
    print(f"local cluster ready in {time.monotonic() - t0:.1f}s: {c.timings}")
    yield c
    c.stop()
    for name, comp in list(c.components.items()):
        assert not comp.alive(), f"{name} still running after stop()"


def kjson(c, *args):
    return json.loads(c.kubectl(*args, "-o", "json").stdout)


DAEMONSET = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: smoke}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: gcu-agent, namespace: smoke}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: gcu-agent, namespace: smoke}}
spec:
  selector: {{matchLabels: {{app: gcu-agent}}}}
  template:
    metadata: {{labels: {{app: gcu-agent}}}}
    spec:
      serviceAccountName: gcu-agent
      priorityClassName: system-node-critical
      nodeSelector: {{"{GCU_LABEL}": "true"}}
      tolerations:
      - {{key: enflame.com/gcu, operator: Exists, effect: NoSchedule}}
      containers:
      - name: agent
        image: example.invalid/gcu-agent:1.0
        securityContext: {{privileged: true}}
        resources:
          requests: {{cpu: 100m, memory: 64Mi}}
          limits: {{cpu: 500m, memory: 256Mi}}
        volumeMounts: [{{name: dev, mountPath: /dev}}]
      volumes:
      - name: dev
        hostPath: {{path: /dev, type: Directory}}
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: smoke}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: example.invalid/web:1
        ports: [{containerPort: 9400}]
        resources: {requests: {cpu: 50m, memory: 32Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: smoke}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 9400, targetPort: 9400, nodePort: 30940}]
"""



def stopped(pid: int) -> bool:
    """The process is gone or a zombie; one reaped while we look (its /proc entry vanishing mid-read) is gone too."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"  # the state, after (comm)
    except (FileNotFoundError, ProcessLookupError):
        return True

def test_cluster_basics(cluster):
    c = cluster
    assert Path(c.kubeconfig).is_file()
    assert c.server.startswith("https://127.0.0.1:")
    ctx = c.kubectl("config", "current-context").stdout.strip()
    assert ctx == "gcu-local"
    nodes = kjson(c, "get", "nodes")["items"]
    names = sorted(n["metadata"]["name"] for n in nodes)
    assert names == ["cpu-node-1", "gcu-node-1", "gcu-node-2"]
    for n in nodes:
        conds = {x["type"]: x["status"] for x in n["status"]["conditions"]}
        assert conds["Ready"] == "True", n["metadata"]["name"]
        assert n["status"]["allocatable"]["cpu"] == "32"
    g1 = next(n for n in nodes if n["metadata"]["name"] == "gcu-node-1")
    assert g1["status"]["allocatable"]["enflame.com/gcu"] == "8"
    versions = json.loads(c.kubectl("version", "-o", "json").stdout)
    assert versions["clientVersion"]["gitVersion"] == versions["serverVersion"]["gitVersion"] == f"v{K8S_VERSION}"
    # the version devtools/go builds, unless a run asks for the oldest supported one (scripts/test-oldest-kubernetes.sh)
    assert K8S_VERSION == kubernetes_version() == go_requirement(KUBERNETES_BUILD_MODULES[os.environ.get("GCU_KUBERNETES") or "newest"] / "go.mod", "k8s.io/kubernetes")
    # every simulated node reports the server's kubelet version and its own container runtime
    info = {n["metadata"]["name"]: n["status"]["nodeInfo"] for n in nodes}
    assert {i["kubeletVersion"] for i in info.values()} == {f"v{K8S_VERSION}"}
    assert info["gcu-node-1"]["containerRuntimeVersion"] == "containerd://1.6.20"
    assert info["gcu-node-2"]["containerRuntimeVersion"] == info["cpu-node-1"]["containerRuntimeVersion"] \
        == DEFAULT_RUNTIME == "docker://20.10.24"
    # etcd is the 3.5 build from Go modules, not Debian's 3.4
    tc = Toolchain.find()
    assert f"etcd-{ETCD_VERSION}" in tc.etcd and ETCD_VERSION.startswith("3.5.")
    out = subprocess.run([tc.etcd, "--version"], capture_output=True, text=True).stdout
    assert f"etcd Version: {ETCD_VERSION}" in out


def test_daemonset_deployment_gc_namespace(cluster):
    c = cluster
    mark = c.audit_offset()
    c.kubectl("apply", "-f", "-", input=DAEMONSET)

    def ds_ready():
        st = kjson(c, "-n", "smoke", "get", "ds", "gcu-agent").get("status", {})
        want = st.get("desiredNumberScheduled")
        return st if want == 2 and st.get("numberReady") == want and st.get("numberAvailable") == want else None
    st = wait_for(ds_ready, 60, what="DaemonSet numberReady == desiredNumberScheduled == 2")
    assert st["currentNumberScheduled"] == 2 and st.get("numberMisscheduled", 0) == 0

    pods = kjson(c, "-n", "smoke", "get", "pods", "-l", "app=gcu-agent")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gcu-node-1", "gcu-node-2"]
    for p in pods:
        assert p["status"]["phase"] == "Running" and p["status"].get("podIP")
        assert p["spec"]["priority"] == 2000001000      # system-node-critical
        assert p["spec"]["serviceAccountName"] == "gcu-agent"
        # ServiceAccount admission mounted a bound service-account token (projected, 1.22+)
        assert any(src.get("serviceAccountToken") for v in p["spec"]["volumes"]
                   for src in (v.get("projected") or {}).get("sources") or [])

    # write requests by the admin user, counted from the audit log
    counts = c.write_counts(since=mark)
    assert counts[("create", "daemonsets")] == 1
    assert counts[("create", "serviceaccounts")] == 1
    assert counts[("create", "namespaces")] == 1
    # controllers write as their own service accounts (use-service-account-credentials)
    users = {e["user"]["username"] for e in c.audit_events(since=mark, user=None)}
    assert "system:serviceaccount:kube-system:daemon-set-controller" in users

    # Deployment + NodePort service -> endpoints
    c.kubectl("apply", "-f", "-", input=DEPLOYMENT)

    def endpoints():
        # the endpoints controller creates the object asynchronously: absent just after the apply is "not yet"
        r = c.kubectl("-n", "smoke", "get", "endpoints", "web", "-o", "json", check=False)
        if r.returncode != 0:
            assert "NotFound" in r.stderr, r.stderr
            return None
        ep = json.loads(r.stdout)
        addrs = [a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or []]
        return addrs if len(addrs) == 2 else None
    try:   # the endpoints controller follows the pods kwok marks Ready; on a loaded machine that takes a while
        addrs = wait_for(endpoints, 180, what="2 endpoint addresses for service web")
    except AssertionError as e:
        pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"), p["status"].get("podIP"),
                 [c["type"] + "=" + c["status"] for c in p["status"].get("conditions") or []])
                for p in kjson(c, "-n", "smoke", "get", "pods", "-l", "app=web")["items"]]
        raise AssertionError(f"{e}\nweb pods: {pods}\n--- kube-controller-manager log ---\n"
                             f"{log_tail(Path(c.log_path('kube-controller-manager')), 30)}") from None
    assert all(a.startswith("10.244.") for a in addrs), addrs
    web_nodes = {p["spec"]["nodeName"] for p in kjson(c, "-n", "smoke", "get", "pods", "-l", "app=web")["items"]}
    assert "gcu-node-2" not in web_nodes, "untolerated taint ignored"
    svc = kjson(c, "-n", "smoke", "get", "svc", "web")
    assert svc["spec"]["ports"][0]["nodePort"] == 30940

    # deleting the DaemonSet garbage-collects its pods (kwok finalises the deletions)
    c.kubectl("-n", "smoke", "delete", "ds", "gcu-agent", "--wait=true", "--timeout=60s")
    wait_for(lambda: not kjson(c, "-n", "smoke", "get", "pods", "-l", "app=gcu-agent")["items"], 60,
             what="DaemonSet pods garbage-collected")

    # deleting the namespace completes
    c.kubectl("delete", "namespace", "smoke", "--wait=true", "--timeout=90s", timeout=120)
    r = c.kubectl("get", "namespace", "smoke", check=False)
    assert r.returncode != 0 and "NotFound" in r.stderr


def test_add_nodes_later(cluster):
    c = cluster
    c.add_nodes([("gcu-node-3", {GCU_LABEL: "true"})])
    n = kjson(c, "get", "node", "gcu-node-3")
    assert n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert {x["type"]: x["status"] for x in n["status"]["conditions"]}["Ready"] == "True"


def test_playing_the_kubelet_advertises_gcus_and_kwok_heartbeats_keep_them(tmp_path):
    """set_node_status patches the node's status as a device plugin's kubelet would; kwok's node heartbeat
    (here every 1-2 s instead of ~10 min) rewrites conditions only, so the advertised resource stays."""
    tc = _require(Toolchain.find)
    stages = Path(tc.kwok_config).read_text()
    assert "durationMilliseconds: 600000" in stages and "jitterDurationMilliseconds: 610000" in stages
    fast = tmp_path / "kwok-fast-heartbeat.yaml"
    # Over a second apart: a heartbeat within the same second as the last changes nothing (timestamps have 1 s
    # resolution), so no watch event would bring the next one.
    fast.write_text(stages.replace("durationMilliseconds: 600000", "durationMilliseconds: 1100")
                    .replace("jitterDurationMilliseconds: 610000", "jitterDurationMilliseconds: 2000"))
    tc.kwok_config = str(fast)
    with LocalCluster(tmp_path / "c", nodes=[("gcu-node-1", {GCU_LABEL: "true"})], audit=False, toolchain=tc) as c:
        node = c.set_node_status("gcu-node-1", capacity={"enflame.com/gcu": 8}, allocatable={"enflame.com/gcu": "8"},
                                 runtime="containerd://1.6.20")
        assert node["status"]["allocatable"]["enflame.com/gcu"] == "8"
        assert node["status"]["allocatable"]["cpu"] == "32", "merge patch dropped the other resources"

        def heartbeat():
            n = kjson(c, "get", "node", "gcu-node-1")
            ready = next(x for x in n["status"]["conditions"] if x["type"] == "Ready")
            return n, ready["lastHeartbeatTime"]
        _, first = heartbeat()
        # two heartbeats later (timestamps have 1 s resolution)
        beats = {first}
        n = wait_for(lambda: (lambda r: beats.add(r[1]) or (r[0] if len(beats) >= 3 else None))(heartbeat()),
                     30, 0.3, what="two kwok node heartbeats")
        assert n["status"]["allocatable"]["enflame.com/gcu"] == "8"
        assert n["status"]["capacity"]["enflame.com/gcu"] == "8"
        assert n["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://1.6.20"
        # the scheduler sees the resource: a pod asking for 2 GCUs binds to the node and kwok runs it
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gcu-user", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x/gcu-user:1",
                                     "resources": {"limits": {"enflame.com/gcu": "2"}}}]}}))
        pod = wait_for(lambda: (lambda p: p if p.get("status", {}).get("phase") == "Running" else None)(
            kjson(c, "get", "pod", "gcu-user")), 60, what="pod with an enflame.com/gcu limit Running")
        assert pod["spec"]["nodeName"] == "gcu-node-1"
        # taking the resource away again (None removes the key)
        n = c.set_node_status("gcu-node-1", capacity={"enflame.com/gcu": None}, allocatable={"enflame.com/gcu": None})
        assert "enflame.com/gcu" not in n["status"]["allocatable"]


def test_hundred_nodes(tmp_path):
    """100 simulated nodes: start time, and a DaemonSet on the 60 GCU nodes gets ready."""
    _require(Toolchain.find)
    nodes = [(f"gcu-node-{i}", {GCU_LABEL: "true"}) for i in range(1, 61)] + \
        [(f"cpu-node-{i}", {}) for i in range(1, 41)]
    t0 = time.monotonic()
    with LocalCluster(tmp_path / "c100", nodes=nodes, audit=False) as c:
        startup = time.monotonic() - t0
        print(f"100-node cluster ready in {startup:.1f}s")
        assert len(kjson(c, "get", "nodes")["items"]) == 100
        ds = json.dumps({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"nodeSelector": {GCU_LABEL: "true"},
                                           "priorityClassName": "system-node-critical",
                                           "containers": [{"name": "a", "image": "x/agent:1",
                                                           "resources": {"requests": {"cpu": "100m"}}}]}}}})
        c.kubectl("apply", "-f", "-", input=ds)

        def ready():
            st = kjson(c, "-n", "kube-system", "get", "ds", "agent").get("status", {})
            return st.get("desiredNumberScheduled") == 60 and st.get("numberReady") == 60
        wait_for(ready, 90, 0.5, what="DaemonSet ready on 60 GCU nodes")
    assert startup < 60


def test_cli_up_status_down(tmp_path):
    _require(Toolchain.find)
    state = tmp_path / "state"
    pids: list = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "devtools.localcluster"]
    up = subprocess.run(cmd + ["up", "--state-dir", str(state), "--nodes", "2", "--gcu-nodes", "1", "--gcu-capacity", "4"],
                        capture_output=True, text=True, env=env, timeout=180)
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip().splitlines()[-1]
        assert Path(kubeconfig).is_file()
        # the CLI process has exited; the cluster must still answer
        st = subprocess.run(cmd + ["status", "--state-dir", str(state)], capture_output=True, text=True,
                            env=env, timeout=60)
        assert st.returncode == 0, st.stdout + st.stderr
        assert json.loads(st.stdout)["running"] is True
        pids = [v["pid"] for v in json.loads((state / "state.json").read_text())["components"].values()]
        tc = Toolchain.find()
        out = subprocess.run([tc.kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "-l", f"{GCU_LABEL}=true",
                              "-o", "name"], capture_output=True, text=True, timeout=60)
        assert out.stdout.split() == ["node/gcu-node-1"], out.stderr
        alloc = subprocess.run([tc.kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "-o",
                                "jsonpath={range .items[*]}{.metadata.name}={.status.allocatable.enflame\\.com/gcu} {end}"],
                               capture_output=True, text=True, timeout=60)
        assert sorted(alloc.stdout.split()) == ["cpu-node-1=", "gcu-node-1=4"], alloc.stdout + alloc.stderr
    finally:
        down = subprocess.run(cmd + ["down", "--state-dir", str(state)], capture_output=True, text=True,
                              env=env, timeout=120)
    assert down.returncode == 0, down.stderr
    for pid in pids:
        assert stopped(pid), pid


# --------------------------------------------------------------------------- dockerd

def test_dockerd_runtime_switch_by_sighup(tmp_path):
    _require(find_binaries)
    d = Dockerd(tmp_path / "dockerd")
    d.start()
    try:
        assert d.host.startswith("unix://") and Path(d.socket).exists()
        assert d.pidfile.exists() and d.config_file.exists()
        d.ensure_base_image()
        out = d.docker("run", "--rm", "gcu-test-base:latest", "sh", "-c", "echo hello-from-busybox").stdout
        assert "hello-from-busybox" in out
        cid = d.docker("run", "-d", "gcu-test-base:latest", "sleep", "600").stdout.strip()
        before = d.docker("inspect", "-f", "{{.State.Pid}} {{.State.StartedAt}}", cid).stdout.strip()
        assert d.docker("info", "--format", "{{.DefaultRuntime}}").stdout.strip() == "runc"
        daemon_pid = d.daemon_pid()

        d.update_config(runtimes={"enflame": {"path": d.runc_path}}, **{"default-runtime": "enflame"})
        d.reload()   # SIGHUP
        wait_for(lambda: d.docker("info", "--format", "{{.DefaultRuntime}}").stdout.strip() == "enflame",
                 15, 0.1, what="DefaultRuntime == enflame")

        assert d.daemon_pid() == daemon_pid, "dockerd restarted"
        after = d.docker("inspect", "-f", "{{.State.Running}} {{.State.Pid}} {{.State.StartedAt}}", cid)
        assert after.stdout.strip() == f"true {before}", "container did not keep running"
        cid2 = d.docker("run", "-d", "gcu-test-base:latest", "sleep", "600").stdout.strip()
        assert d.docker("inspect", "-f", "{{.HostConfig.Runtime}} {{.State.Running}}", cid2).stdout.strip() \
            == "enflame true"
    finally:
        pid = d.pid
        d.stop()
    assert stopped(pid), pid
