"""A real kubelet node with stand-in GCUs: devtools/realnode.py and devtools/fakegcu. Never skipped.

One LocalCluster (Kubernetes K8S_VERSION, one simulated node next to the real one) and one
RealNode (kubelet K8S_VERSION + containerd in namespaces of its own, 4 stand-in GCU devices).
The project's device-plugin image is built with the stand-in plugin as gcu-k8s-plugin
(images/devicePlugin/Dockerfile on the debootstrap bookworm base), imported into the
node's containerd and run as the project's own DaemonSet (components.manifests) with
imagePullPolicy Never. The module ends by stopping the node and checking that nothing
of it is left on the machine; another test kills the Python process that started a node
and checks the same.

Times (cluster and node start, image build and import) are printed at the end of the
module, also without -s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from realnode_fixtures import (
    GCU_RESOURCE,
    IN_CLUSTER_VERSION,
    allocatable_gcus,
    apply,
    device_plugin_daemonset,
    get,
    kubectl_image,
    shell_pod,
    wait_pod_phase,
    wait_until,
)

from devtools import clusterdns, fakegcu, imagebuild, mounts_under
from devtools.localcluster import K8S_VERSION, LocalCluster
from devtools.realnode import (
    CLUSTER_DNS_IP,
    NODE_CONTAINERD,
    RealNode,
    RealNodeError,
    containerd2_version,
    leftovers,
    link_name,
    netns_name,
)
from devtools.sweep import sweep_machine

pytestmark = pytest.mark.timeout(1800)

PROJECT_DIR = Path(__file__).resolve().parent.parent
# Per run: node names are unique per machine (another run, or `gcu-stack --real-nodes`, may have nodes).
RUN = f"t{os.getpid() % 100000}"
NODE = f"gcu-{RUN}-1"
GCU_LABELS = {"enflame.com/gcu.present": "true", "feature.node.kubernetes.io/pci-1e36.present": "true"}
FAKE_GCUS = 4
TIMES: dict[str, float] = {}
ROUTE_LOCALNET = Path("/proc/sys/net/ipv4/conf/all/route_localnet")


def _machine_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = time.monotonic()
    # InternalIP first: the API server reaches the real kubelet (logs) at the node's veth address,
    # the node name does not resolve.
    with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=[("cpu-sim-1", {})],
                      extra_apiserver_args=["--kubelet-preferred-address-types=InternalIP,Hostname"]) as c:
        TIMES["cluster start"] = time.monotonic() - started
        yield c


@pytest.fixture(scope="module")
def machine_before(real_node_machine):
    """What the machine looks like before any real node, once what killed runs left is gone (their nodes' links,
    the /run/netns mount)."""
    sweep_machine()
    etc = Path("/etc/containerd/config.toml")
    return {"links": _machine_links(), "run-netns-mount": " /run/netns " in Path("/proc/self/mountinfo").read_text(),
            "etc-containerd": etc.read_bytes() if etc.exists() else None, "route-localnet": ROUTE_LOCALNET.read_text(),
            "lib-modules": os.path.isdir("/lib/modules")}


@pytest.fixture(scope="module")
def node(cluster, machine_before, tmp_path_factory):
    started = time.monotonic()
    n = RealNode.for_cluster(cluster, tmp_path_factory.mktemp("realnode"), NODE, labels=GCU_LABELS,
                             fake_gcus=FAKE_GCUS)
    n.start()
    TIMES["node start (to Ready)"] = time.monotonic() - started
    TIMES["  of which sandbox image import"] = n.timings.get("sandbox-image-import", 0)
    yield n
    n.stop()   # no-op when test_stop_leaves_nothing_behind already stopped it


@pytest.fixture(scope="module")
def plugin_image(node, tmp_path_factory):
    """The project's devicePlugin image with the stand-in plugin, imported into the node's containerd."""
    started = time.monotonic()
    binary = fakegcu.binary()
    built = binary.parent / "build-seconds"   # written when it was built (cached afterwards)
    TIMES["stand-in plugin: go build when it was built (then cached)"] = float(built.read_text()) if built.exists() \
        else time.monotonic() - started
    workdir = tmp_path_factory.mktemp("plugin-image")
    with imagebuild.build_daemon(workdir / "dockerd") as dockerd:
        started = time.monotonic()
        image = fakegcu.build_device_plugin_image(dockerd, workdir / "project")
        TIMES["device-plugin image build (base import + docker build)"] = time.monotonic() - started
        TIMES["device-plugin image import into the node"] = node.import_image(dockerd, image)
    return image


@pytest.fixture(scope="module")
def gcu_plugin(cluster, node, plugin_image):
    """The project's device-plugin DaemonSet running the stand-in; returns the manifest once the node
    has every fake GCU allocatable."""
    daemonset = device_plugin_daemonset(plugin_image)
    started = time.monotonic()
    apply(cluster, daemonset)
    wait_until(lambda: allocatable_gcus(node) == FAKE_GCUS, 180,
               f"{GCU_RESOURCE}: {FAKE_GCUS} in {NODE}'s allocatable",
               diagnose=lambda: _plugin_diagnosis(cluster, node))
    TIMES["device-plugin DaemonSet applied -> GCUs allocatable"] = time.monotonic() - started
    return daemonset


def _pod_ip_in(node, pod) -> bool:
    net = node.pod_subnet.rsplit(".", 1)[0] + "."
    return pod["status"].get("podIP", "").startswith(net)


# --------------------------------------------------------------------------- the stand-in plugin alone

def test_the_plugins_go_unit_tests_pass():
    started = time.monotonic()
    out = fakegcu.go_test()
    TIMES["stand-in plugin: go test"] = time.monotonic() - started
    assert "--- PASS: TestPluginRegistersAllocatesWatchesHealthAndSurvivesKubeletRestart" in out, out


def test_the_plugin_is_a_static_binary_that_answers_help():
    binary = fakegcu.binary()
    assert Path(binary).parent.name.startswith("fake-gcu-plugin-")
    assert b"statically linked" in subprocess.run(["file", binary], capture_output=True).stdout or \
        b"ld-linux" not in binary.read_bytes()[:4096]
    answer = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=10)
    assert answer.returncode == 0 and answer.stdout.startswith("Usage: gcu-k8s-plugin"), answer
    assert "-resource-name" in answer.stdout and "GCU_FAKE_DEVICE_DIR" in answer.stdout
    wrong = subprocess.run([str(binary), "--no-such-flag"], capture_output=True, text=True, timeout=10)
    assert wrong.returncode == 2 and "no-such-flag" in wrong.stderr


# --------------------------------------------------------------------------- the node

def test_the_node_registers_ready_with_its_labels(cluster, node):
    obj = get(cluster, "node", NODE)
    info = obj["status"]["nodeInfo"]
    assert info["kubeletVersion"] == f"v{K8S_VERSION}"
    runtime = info["containerRuntimeVersion"]
    if NODE_CONTAINERD == "2":
        assert runtime.removeprefix("containerd://").lstrip("v") == containerd2_version(), runtime
    else:
        assert runtime.startswith("containerd://1.6."), runtime
    assert {"type": "InternalIP", "address": node.node_ip} in obj["status"]["addresses"]
    for key, value in GCU_LABELS.items():   # the second one is set through the API: a kubelet may not
        assert obj["metadata"]["labels"].get(key) == value
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    assert conditions["Ready"] == "True", conditions
    # the simulated node is there too, untouched
    assert get(cluster, "node", "cpu-sim-1")["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_the_node_keeps_its_network_and_mounts_to_itself(node, machine_before):
    # On the machine: one veth end, nothing else (no bridge, no pod veths).
    assert _machine_links() - machine_before["links"] == {link_name(NODE)}
    assert netns_name(NODE) in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    # In the node: its veth end with the node IP.
    inside = subprocess.run(node.in_node("ip", "-o", "-4", "addr", "show"), capture_output=True, text=True,
                            check=True).stdout
    assert f"inet {node.node_ip}/30" in inside
    # The kubelet's mounts (its rshared root dir, pods' volumes) are not in the machine's mount table.
    mine = Path("/proc/self/mountinfo").read_text()
    assert str(node.workdir) not in mine and "/var/lib/kubelet" not in mine
    inside_mounts = subprocess.run(node.in_node("cat", "/proc/self/mountinfo"), capture_output=True, text=True,
                                   check=True).stdout
    # The kubelet's root dir is on a shared mount of the node (the node's mounts are shared with the mount namespace
    # its containerd runs in, which so gets the pods' volumes), never one of the machine's.
    var_lib = [line for line in inside_mounts.splitlines() if line.split()[4] == "/var/lib"]
    assert var_lib and "shared:" in var_lib[-1].split(" - ")[0], inside_mounts
    # The node has the kernel modules directory a driver's pod mounts; the machine has none made for it.
    subprocess.run(node.in_node("test", "-d", "/lib/modules"), check=True)
    assert os.path.isdir("/lib/modules") == machine_before["lib-modules"]
    # The machine's /var/lib/kubelet is not the node's (it is not even created).
    assert not os.path.lexists("/var/lib/kubelet") or "var/lib/kubelet" in node.state.get("host_paths_before", [])
    # containerd is where a node has it (the toolkit's defaults), the machine's own config is not touched
    subprocess.run(node.in_node("sh", "-c", "test -S /run/containerd/containerd.sock && "
                                f"cmp /etc/containerd/config.toml {node.containerd_config}"), check=True)
    # containerd itself reads its configuration as written (version 3 on containerd 2: the CRI's parts apart)
    dumped = tomllib.loads(subprocess.run([node.toolchain["containerd"], "--config", str(node.containerd_config),
                                           "config", "dump"], capture_output=True, text=True, check=True).stdout)
    plugins = dumped["plugins"]
    if node.containerd_config_version == 3:
        # the file stays as clusters on containerd 2.0/2.1 have it; 2.4 migrates it to its own version 4 on load
        assert tomllib.loads(node.containerd_config.read_text())["version"] == 3 and dumped["version"] == 4
        images = plugins["io.containerd.cri.v1.images"]
        assert (images["snapshotter"], images["pinned_images"]["sandbox"]) == (node.snapshotter, node.sandbox_image)
        assert plugins["io.containerd.cri.v1.runtime"]["cni"]["bin_dirs"] == [node.toolchain["cni_dir"]]
        assert plugins["io.containerd.nri.v1.nri"]["disable"] is True
    else:
        cri = plugins["io.containerd.grpc.v1.cri"]
        assert (cri["containerd"]["snapshotter"], cri["sandbox_image"]) == (node.snapshotter, node.sandbox_image)
    if machine_before["etc-containerd"] is not None:
        assert Path("/etc/containerd/config.toml").read_bytes() == machine_before["etc-containerd"]
    # The kernel tunables the kubelet wants are shadowed in the node, the machine's are untouched.
    for key, wanted in (("kernel/panic_on_oops", "1"), ("vm/overcommit_memory", "1")):
        seen = subprocess.run(node.in_node("cat", f"/proc/sys/{key}"), capture_output=True, text=True).stdout
        assert seen.strip() == wanted


def test_a_pod_network_pod_gets_a_bridge_ip_and_a_host_network_pod_completes(cluster, node):
    image = node.sandbox_image   # static busybox, already in the node's containerd
    apply(cluster, shell_pod("podnet", kubectl_image(node, cluster.toolchain.kubectl),
                             f"ip -4 -o addr show eth0; echo routes; ip route; {IN_CLUSTER_VERSION}; echo; echo done",
                             node_name=NODE))
    podnet = wait_pod_phase(cluster, node, "default", "podnet")
    # The bridge plugin creates cni0 when it sets up the first pod-network sandbox: the host-network pod
    # looks for it only once that pod has run (started together, it raced the bridge and saw no cni0).
    apply(cluster, shell_pod("hostnet", image, "ip -4 -o addr show; echo done", host_network=True, node_name=NODE))
    hostnet = wait_pod_phase(cluster, node, "default", "hostnet")
    assert _pod_ip_in(node, podnet), (podnet["status"].get("podIP"), node.pod_subnet)
    assert hostnet["status"]["podIP"] == node.node_ip
    log = node.pod_log("default", "podnet")
    assert f"inet {podnet['status']['podIP']}/24" in log, log
    assert f'"gitVersion": "v{K8S_VERSION}"' in log, f"the kubernetes Service is not reachable from the pod:\n{log}"
    hlog = node.pod_log("default", "hostnet")
    assert "cni0" in hlog and node.node_ip in hlog, hlog
    # the API server reaches the kubelet too (kubectl logs)
    assert "done" in cluster.kubectl("logs", "podnet").stdout
    # the bridge exists in the node, not on the machine
    assert "cni0" not in _machine_links()
    cluster.kubectl("delete", "pod", "podnet", "hostnet", "--wait=true", timeout=120)


def _machine_kube_chains() -> list[str]:
    out = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "KUBE-" in line]


def test_services_work_in_the_node_through_its_kube_proxy_and_leave_the_machines_iptables_alone(cluster, node, machine_before):
    """kube-proxy (iptables mode) in the node's network namespace: a pod reaches a ClusterIP Service by its IP, the
    machine reaches its NodePort on the node's address, and in-cluster API clients still reach the API server (the
    `kubernetes` Service now goes through kube-proxy to the advertised endpoint, which the node's agent answers)."""
    image = node.sandbox_image
    labels = {"app": "web"}
    server = shell_pod("web", image, "mkdir -p /www && echo served-by-$HOSTNAME > /www/index.html && "
                                     "exec httpd -f -p 8080 -h /www", node_name=NODE, restart="Always")
    server["metadata"]["labels"] = labels
    apply(cluster, server)
    apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"type": "NodePort", "selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}})
    wait_pod_phase(cluster, node, "default", "web", phases=("Running",))
    service = get(cluster, "service", "web", "default")
    cluster_ip, node_port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["nodePort"]
    # (kube-proxy writes a new Service's rules within a second or so: a few tries; busybox wget -T segfaults, hence timeout)
    apply(cluster, shell_pod("client", kubectl_image(node, cluster.toolchain.kubectl),
                             f"for i in 1 2 3 4 5 6 7 8 9 10; do timeout 3 wget -q -O - http://{cluster_ip}/ && break; "
                             f"sleep 1; done; timeout 10 {IN_CLUSTER_VERSION}; echo done", node_name=NODE))
    wait_pod_phase(cluster, node, "default", "client")
    log = node.pod_log("default", "client")
    assert "served-by-web" in log, f"the ClusterIP Service {cluster_ip} did not answer from a pod:\n{log}"
    assert f'"gitVersion": "v{K8S_VERSION}"' in log, f"the kubernetes Service (through kube-proxy) did not answer:\n{log}"
    # From the machine, as a client outside the cluster would: the NodePort on the node's address.
    body = wait_until(lambda: _get(f"http://{node.node_ip}:{node_port}/"), 30, what=f"NodePort {node_port} on {node.node_ip}")
    assert "served-by-web" in body
    rules = subprocess.run(["ip", "netns", "exec", netns_name(NODE), "iptables", "-t", "nat", "-S", "KUBE-SERVICES"],
                           capture_output=True, text=True, check=True).stdout
    assert cluster_ip in rules, rules
    assert _machine_kube_chains() == [], "kube-proxy wrote to the machine's own iptables"
    # Node ports on the node's 127.0.0.1 need route_localnet: the node's network namespace's own, not the machine's.
    assert ROUTE_LOCALNET.read_text() == machine_before["route-localnet"]
    assert subprocess.run(["ip", "netns", "exec", netns_name(NODE), "cat", str(ROUTE_LOCALNET)], capture_output=True,
                          text=True, check=True).stdout.strip() == "1"
    cluster.kubectl("delete", "pod", "web", "client", "--wait=true", timeout=120)
    cluster.kubectl("delete", "service", "web")


def test_cluster_dns_answers_for_services_from_pods_on_the_node(cluster, node):
    """CoreDNS (devtools/clusterdns.py, built from its Go module) as kubeadm deploys it: the kubelet gives pods the
    kube-dns Service address and the cluster's search path, and a pod reaches a Service by its short and its full
    name (through kube-proxy to CoreDNS, which reads Services from the API server); unknown names are NXDOMAIN."""
    done = clusterdns.up(cluster.kubeconfig, [node], replicas=1)
    TIMES["cluster DNS: CoreDNS image import"] = done["import-seconds"]
    TIMES["cluster DNS: up (import + apply + a replica ready)"] = done["seconds"]
    image = node.sandbox_image
    server = shell_pod("named", image, "mkdir -p /www && echo served-by-$HOSTNAME > /www/index.html && "
                                       "exec httpd -f -p 8080 -h /www", node_name=NODE, restart="Always")
    server["metadata"]["labels"] = {"app": "named"}
    apply(cluster, server)
    apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "named", "namespace": "default"},
                    "spec": {"selector": {"app": "named"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    wait_pod_phase(cluster, node, "default", "named", phases=("Running",))
    cluster_ip = get(cluster, "service", "named", "default")["spec"]["clusterIP"]
    full = "named.default.svc.cluster.local"
    apply(cluster, shell_pod("resolver", image, "cat /etc/resolv.conf; "
                             f"for i in 1 2 3 4 5 6 7 8 9 10; do nslookup {full} && break; sleep 1; done; "
                             "timeout 5 wget -q -O - http://named/; "
                             f"timeout 5 wget -q -O - http://{full}/; "
                             "nslookup kubernetes.default.svc.cluster.local; nslookup nosuch.default.svc.cluster.local; echo done",
                             node_name=NODE))
    wait_pod_phase(cluster, node, "default", "resolver")
    log = node.pod_log("default", "resolver")
    assert f"nameserver {CLUSTER_DNS_IP}" in log, log
    assert "search default.svc.cluster.local svc.cluster.local cluster.local" in log, log
    assert re.search(rf"Name:\s+{re.escape(full)}\s+Address:?\s+{re.escape(cluster_ip)}", log), log
    assert log.count("served-by-named") == 2, f"the Service by its short and its full name:\n{log}"
    assert re.search(r"Name:\s+kubernetes\.default\.svc\.cluster\.local\s+Address:?\s+10\.96\.0\.1\b", log), log
    assert "NXDOMAIN" in log, log
    coredns = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "json").stdout)
    assert [p["spec"]["nodeName"] for p in coredns["items"]] == [NODE]
    cluster.kubectl("delete", "pod", "named", "resolver", "--wait=true", timeout=120)
    cluster.kubectl("delete", "service", "named")
    cluster.kubectl("delete", "-n", "kube-system", "deployment", "coredns", "--wait=true", timeout=120)


def _get(url: str):
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.read().decode()
    except (urllib.error.URLError, OSError):
        return None


def test_what_a_pod_does_to_the_hosts_dev_stays_in_the_node(cluster, node):
    # a driver-like pod: privileged, the host's /dev read-write at /dev (the kubelet also puts the
    # container's /dev/termination-log there)
    pod = shell_pod("devwriter", node.sandbox_image, "touch /dev/driver-was-here && echo wrote", node_name=NODE)
    pod["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}}]
    pod["spec"]["containers"][0].update(securityContext={"privileged": True},
                                        volumeMounts=[{"name": "dev", "mountPath": "/dev"}])
    apply(cluster, pod)
    wait_pod_phase(cluster, node, "default", "devwriter")
    assert node.dev_path("driver-was-here").exists() and node.dev_path("termination-log").exists()
    assert not os.path.lexists("/dev/driver-was-here") and not os.path.lexists("/dev/termination-log")
    cluster.kubectl("delete", "pod", "devwriter", "--wait=true", timeout=120)


# --------------------------------------------------------------------------- stand-in GCUs

def test_the_projects_device_plugin_daemonset_advertises_the_fake_gcus(cluster, node, plugin_image, gcu_plugin):
    devices = sorted(node.dev_path().glob("gcu*"))
    assert [d.name for d in devices] == [f"gcu{i}" for i in range(FAKE_GCUS)]
    for dev in devices:   # the hardware: character devices in the node's own /dev
        st = dev.stat()
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
    assert not any(Path("/dev").glob("gcu*")), "nothing may appear in the machine's /dev"
    container = gcu_plugin["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == plugin_image and container["imagePullPolicy"] == "Never"
    assert container["args"] == [f"--resource-name={GCU_RESOURCE}"]
    pod = wait_until(lambda: _ready_plugin_pod(cluster), 60, "the plugin pod to be Ready",
                     diagnose=lambda: _plugin_diagnosis(cluster, node))
    assert f"found {FAKE_GCUS} GCUs in /dev" in node.pod_log("kube-system", pod["metadata"]["name"])
    assert int(get(cluster, "node", NODE)["status"]["capacity"][GCU_RESOURCE]) == FAKE_GCUS
    assert GCU_RESOURCE not in get(cluster, "node", "cpu-sim-1")["status"]["allocatable"]


def _plugin_pod(cluster) -> dict:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l",
                                      "app.kubernetes.io/name=enflame-gcu-k8s-plugin", "-o", "json").stdout)["items"]
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == NODE]
    return pod


def _ready_plugin_pod(cluster):
    pod = _plugin_pod(cluster)
    return pod if all(c.get("ready") for c in pod["status"].get("containerStatuses") or [{}]) else None


def _plugin_diagnosis(cluster, node) -> str:
    out = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    try:
        pod = _plugin_pod(cluster)
        out += "\n--- plugin log ---\n" + node.pod_log("kube-system", pod["metadata"]["name"])
        out += "\n--- status ---\n" + json.dumps(pod["status"], indent=1)[:2000]
    except Exception as e:
        out += f"\n(no plugin pod log: {e})"
    return out


def test_a_pod_requesting_one_gcu_runs_and_sees_exactly_one_device(cluster, node, gcu_plugin):
    script = ("ls /dev | grep '^gcu' | sed 's|^|device /dev/|'; "
              "for d in /dev/gcu*; do stat -c 'type %F major %t minor %T' $d; done; "
              "echo visible=$GCU_FAKE_VISIBLE_DEVICES; echo done")
    apply(cluster, shell_pod("gcu-user", node.sandbox_image, script, limits={GCU_RESOURCE: "1"}))
    pod = wait_pod_phase(cluster, node, "default", "gcu-user")
    assert pod["spec"]["nodeName"] == NODE
    log = node.pod_log("default", "gcu-user")
    devices = re.findall(r"^device (/dev/gcu\d+)$", log, re.M)
    assert len(devices) == 1, log
    assert "type character special file major 1 minor 3" in log, log
    assert f"visible={devices[0][len('/dev/gcu'):]}" in log, log
    # two GCUs for another pod: two others... or the same ones, now that the first pod is done
    apply(cluster, shell_pod("gcu-pair", node.sandbox_image, script, limits={GCU_RESOURCE: "2"}))
    wait_pod_phase(cluster, node, "default", "gcu-pair")
    assert len(re.findall(r"^device /dev/gcu\d+$", node.pod_log("default", "gcu-pair"), re.M)) == 2
    # more than the node has: not scheduled
    apply(cluster, shell_pod("gcu-greedy", node.sandbox_image, "true", limits={GCU_RESOURCE: str(FAKE_GCUS + 1)}))
    wait_until(lambda: any(c.get("reason") == "Unschedulable" for c in
                           (get(cluster, "pod", "gcu-greedy", "default")["status"].get("conditions") or [])),
               60, "the pod asking for more GCUs than there are to be Unschedulable")
    cluster.kubectl("delete", "pod", "gcu-user", "gcu-pair", "gcu-greedy", "--wait=true", timeout=120)


def test_the_plugin_registers_again_after_a_kubelet_restart(cluster, node, gcu_plugin):
    plugin = _plugin_pod(cluster)["metadata"]["name"]
    TIMES["kubelet restart (to Ready)"] = node.restart_kubelet()
    wait_until(lambda: node.pod_log("kube-system", plugin).count(f"registered {GCU_RESOURCE} with the kubelet") >= 2, 60,
               "the plugin to register again", diagnose=lambda: _plugin_diagnosis(cluster, node))
    wait_until(lambda: allocatable_gcus(node) == FAKE_GCUS, 120, f"{FAKE_GCUS} GCUs allocatable again",
               diagnose=lambda: _plugin_diagnosis(cluster, node))
    assert _plugin_pod(cluster)["metadata"]["name"] == plugin, "the plugin pod kept running"


def test_a_gcu_that_disappears_is_unhealthy_and_leaves_allocatable(cluster, node, gcu_plugin):
    gone = node.dev_path(f"gcu{FAKE_GCUS - 1}")
    gone.unlink()
    try:
        wait_until(lambda: allocatable_gcus(node) == FAKE_GCUS - 1, 120, "one GCU fewer allocatable",
                   diagnose=lambda: _plugin_diagnosis(cluster, node))
    finally:
        node.add_fake_gcus(FAKE_GCUS)
    wait_until(lambda: allocatable_gcus(node) == FAKE_GCUS, 120, "the GCU back in allocatable")


# --------------------------------------------------------------------------- containerd as a service, more nodes

def _task_pid(node, container_id: str) -> int:
    cid = container_id.split("://", 1)[-1]
    for line in node.ctr("tasks", "ls").stdout.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == cid:
            return int(fields[1])
    raise AssertionError(f"no task {cid} in {node.name}'s containerd")


def test_containerd_stopped_from_a_pod_comes_back_and_running_pods_keep_running(cluster, node):
    image = node.sandbox_image
    apply(cluster, shell_pod("survivor", image, "sleep 3600", node_name=NODE))
    survivor = wait_pod_phase(cluster, node, "default", "survivor", ("Running",))
    task = _task_pid(node, survivor["status"]["containerStatuses"][0]["containerID"])
    old = node.containerd_pid()
    # what a toolkit pod activating a runtime does: it stops the node's containerd (hostPID, the pid file)
    # It exits only once the new containerd runs, as the toolkit does: a container that exits while containerd
    # is down has its exit status lost (255, "Unknown") when that containerd comes back.
    # It stops containerd only once the kubelet has had containerd's answer to its StartContainer (the test's go file,
    # written after the kubelet's Started event): stopped before that, the start fails with "error reading from server:
    # EOF" and the kubelet kills the container (a rehearsal of da2bbf7).
    go = node.run_containerd_dir / "restarter-go"
    go.unlink(missing_ok=True)
    restarter = shell_pod("restarter", image, textwrap.dedent("""\
        until [ -e /host/run/containerd/restarter-go ]; do sleep 0.2; done
        pid_file=/host/run/containerd/containerd.pid; old=$(cat $pid_file)
        kill "$old" && echo sent
        until new=$(cat $pid_file 2>/dev/null) && [ -n "$new" ] && [ "$new" != "$old" ] && [ -d /proc/$new ]; do sleep 0.2; done
        sleep 2"""), node_name=NODE)
    restarter["spec"].update(hostPID=True, volumes=[{"name": "run", "hostPath": {"path": "/run/containerd"}}])
    restarter["spec"]["containers"][0].update(securityContext={"privileged": True},
                                              volumeMounts=[{"name": "run", "mountPath": "/host/run/containerd"}])
    apply(cluster, restarter)

    def started_by_the_kubelet():
        return cluster.kubectl("get", "events", "-n", "default", "-o", "name", "--field-selector",
                               "involvedObject.kind=Pod,involvedObject.name=restarter,reason=Started").stdout.strip()

    wait_until(started_by_the_kubelet, 120, "the kubelet's Started event for pod default/restarter")
    started = time.monotonic()
    go.write_text("go\n")
    new = node.wait_containerd_restarted(old, timeout=90)
    TIMES["containerd stopped by a pod -> answering again"] = time.monotonic() - started
    assert new != old
    done = wait_pod_phase(cluster, node, "default", "restarter")
    # (its output may be lost: containerd, which copies it into the log, was just stopped by it)
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    # the running pod's process is the same one, and the node still runs new pods
    assert _task_pid(node, survivor["status"]["containerStatuses"][0]["containerID"]) == task
    assert node.machine_pid(task) and os.path.exists(f"/proc/{node.machine_pid(task)}")
    assert get(cluster, "pod", "survivor", "default")["status"]["phase"] == "Running"
    apply(cluster, shell_pod("after", image, "echo after", node_name=NODE))
    wait_pod_phase(cluster, node, "default", "after")
    TIMES["containerd restart (RealNode.restart_containerd)"] = node.restart_containerd()
    assert _task_pid(node, survivor["status"]["containerStatuses"][0]["containerID"]) == task
    cluster.kubectl("delete", "pod", "survivor", "restarter", "after", "--wait=true", timeout=120)


def test_a_second_real_node_runs_beside_and_goes_without_a_trace(cluster, node, tmp_path):
    name = f"gcu-{RUN}-2"
    second = RealNode.for_cluster(cluster, tmp_path / "second", name,
                                  taints=[{"key": "enflame.com/gcu", "effect": "NoSchedule"}])
    second.start()
    try:
        assert second.node_ip != node.node_ip and second.pod_subnet != node.pod_subnet
        assert get(cluster, "node", name)["spec"]["taints"] == [{"key": "enflame.com/gcu", "effect": "NoSchedule"}]
        pod = shell_pod("on-second", second.sandbox_image, "echo here", node_name=name)
        pod["spec"]["tolerations"] = [{"key": "enflame.com/gcu", "operator": "Exists"}]
        apply(cluster, pod)
        assert _pod_ip_in(second, wait_pod_phase(cluster, second, "default", "on-second"))
        # A hostPID pod sees its node's containerd and containers, as on a machine of its own, and none of another
        # node's: the driver finds who holds a GCU by what the processes it sees have open.
        apply(cluster, shell_pod("mark-first", node.sandbox_image, "sleep 3607", node_name=NODE))
        wait_pod_phase(cluster, node, "default", "mark-first", ("Running",))
        for where, real in ((name, second), (NODE, node)):
            looker = shell_pod(f"ps-{where}", real.sandbox_image,
                               "for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done", node_name=where)
            looker["spec"].update(hostPID=True, tolerations=[{"key": "enflame.com/gcu", "operator": "Exists"}])
            apply(cluster, looker)
            wait_pod_phase(cluster, real, "default", f"ps-{where}")
            seen = real.pod_log("default", f"ps-{where}")
            assert "containerd --config" in seen and "kubelet" not in seen, seen
            assert ("sleep 3607" in seen) == (real is node), seen
    finally:
        assert second.stop() == []
    assert not any(second.leftovers().values()), second.leftovers()
    # the first node is untouched
    assert link_name(NODE) in _machine_links()
    wait_until(lambda: _ready(cluster, NODE), 30, f"{NODE} to stay Ready")
    # a name that is taken by a running node is refused, and the running node is left alone
    with pytest.raises(RealNodeError, match=rf"{NODE} is already running on this machine.*down --state-dir"):
        RealNode.for_cluster(cluster, tmp_path / "clash", NODE).start()
    assert _ready(cluster, NODE) and link_name(NODE) in _machine_links()
    cluster.kubectl("delete", "pod", "on-second", f"ps-{name}", f"ps-{NODE}", "mark-first", "--force",
                    "--grace-period=0", check=False)


def _ready(cluster, name: str) -> bool:
    conditions = {c["type"]: c["status"] for c in get(cluster, "node", name)["status"]["conditions"]}
    return conditions.get("Ready") == "True"


# --------------------------------------------------------------------------- cleanup

HALF_STARTER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {project!r})
    from devtools import realnode
    from devtools.realnode import RealNode
    # killed outright right after its network is made, before its agent or kubelet exist (a test run killed midway)
    RealNode._start_agent = lambda self: os.kill(os.getpid(), signal.SIGKILL)
    realnode.sweep_stale = lambda *a, **k: []   # its own sweep would wait for the test's sweep lock
    RealNode({workdir!r}, {name!r}, {kubeconfig!r}).start()
""")


def test_a_node_killed_while_starting_is_swept_at_once_and_a_running_one_never(cluster, node, tmp_path):
    from devtools import realnode

    name = f"gcu-{RUN}-half"
    script = HALF_STARTER.format(project=str(PROJECT_DIR), workdir=str(tmp_path / "half"), name=name,
                                 kubeconfig=cluster.kubeconfig)
    with realnode.sweep_lock():   # nobody else's sweep (scripts/gcu-stack's under test_setup_path) takes it first
        starter = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert starter.returncode == -signal.SIGKILL, starter.stderr
        assert os.path.exists(f"/run/netns/{netns_name(name)}") and os.path.exists(f"/sys/class/net/{link_name(name)}")
        assert (realnode._OWNERS / f"{name}.json").exists()
        # However young: its owner record names a dead starter. The module's node is running: never taken.
        assert realnode.sweep_stale(min_age=3600, only=[name, NODE], log=lambda m: None) == [name]
    assert not any(leftovers({"name": name, "netns": netns_name(name), "workdir": str(tmp_path / "half")}).values())
    assert not (realnode._OWNERS / f"{name}.json").exists()
    assert (realnode._OWNERS / f"{NODE}.json").exists() and node.api.get(f"/api/v1/nodes/{NODE}")


def test_stop_leaves_nothing_behind(cluster, node, gcu_plugin, machine_before, capsys):
    # a running GCU pod and a hostNetwork pod while stopping: their processes must go too
    apply(cluster, shell_pod("busy-gcu", node.sandbox_image, "sleep 3600", limits={GCU_RESOURCE: "1"}))
    apply(cluster, shell_pod("busy-host", node.sandbox_image, "sleep 3600", host_network=True, node_name=NODE))
    wait_pod_phase(cluster, node, "default", "busy-gcu", ("Running",))
    wait_pod_phase(cluster, node, "default", "busy-host", ("Running",))
    started = time.monotonic()
    problems = node.stop()
    TIMES["node stop (everything removed)"] = time.monotonic() - started
    assert problems == []
    left = node.leftovers()
    assert left == {"processes": [], "mounts": [], "netns": [], "interfaces": [], "cgroups": [], "host_paths": []}, left
    assert _machine_links() == machine_before["links"]
    assert netns_name(NODE) not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert str(node.workdir) not in Path("/proc/self/mountinfo").read_text()
    assert not any(str(node.containerd_socket) in _cmdline(p) for p in _pids())
    assert get(cluster, "node", NODE) is None, "the Node object is deleted"
    with capsys.disabled():
        print("\n\nreal-node suite times (this run):")
        for what, seconds in TIMES.items():
            print(f"  {what:60} {seconds:7.1f} s")


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


CRASHING_STARTER = textwrap.dedent("""
    import os, signal, sys, json
    sys.path.insert(0, {project!r})
    from pathlib import Path
    from devtools.realnode import RealNode
    node = RealNode({workdir!r}, {name!r}, {kubeconfig!r}, ca_cert={ca_cert!r}, ca_key={ca_key!r}, fake_gcus=2)
    node.start()
    print(json.dumps(node.state), flush=True)
    sys.stdin.readline()                     # the test starts a pod, then tells us to die
    os.kill(os.getpid(), signal.SIGKILL)     # no finally, no atexit: the node's agent must clean up
""")


class CrashingStarter:
    """A Python process that starts node `name` (CRASHING_STARTER) and dies by SIGKILL when told to."""

    def __init__(self, cluster, tmp_path: Path, name: str):
        self.cluster, self.name, self.logs = cluster, name, tmp_path / "node" / "logs"
        pki = Path(cluster.workdir) / "pki"
        script = CRASHING_STARTER.format(project=str(PROJECT_DIR), workdir=str(tmp_path / "node"), name=name,
                                         kubeconfig=cluster.kubeconfig, ca_cert=str(pki / "ca.crt"),
                                         ca_key=str(pki / "ca.key"))
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def __enter__(self) -> "CrashingStarter":
        """Once its node runs: the node's state as the starter printed it is `state`."""
        try:
            line = self.proc.stdout.readline()
            assert line, f"the starter failed:\n{self.proc.stderr.read()}"
            self.state = json.loads(line)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def run_pod(self, pod: str) -> None:
        """A pod `pod` sleeping on the node, once it runs."""
        view = SimpleNamespace(name=self.name, log_dir=self.logs)   # what wait_pod_phase uses
        apply(self.cluster, shell_pod(pod, self.state["sandbox_image"], "sleep 3600", node_name=self.name))
        wait_pod_phase(self.cluster, view, "default", pod, ("Running",))

    def die(self) -> None:
        self.proc.stdin.write("die\n")
        self.proc.stdin.flush()
        assert self.proc.wait(30) == -signal.SIGKILL


def test_a_node_whose_test_process_dies_is_removed_completely(cluster, tmp_path):
    name = f"gcu-{RUN}-crash"
    try:
        with CrashingStarter(cluster, tmp_path, name) as starter:
            state = starter.state
            assert get(cluster, "node", name) is not None
            starter.run_pod("orphan")
            starter.die()
            wait_until(lambda: not any(leftovers(state).values()), 60, "the agent to remove the dead starter's node",
                       diagnose=lambda: json.dumps(leftovers(state), indent=1) + "\n"
                       + (starter.logs / "agent.log").read_text())
            assert "teardown done" in (starter.logs / "agent.log").read_text()
            wait_until(lambda: get(cluster, "node", name) is None, 30, "the Node object to be deleted")
    finally:
        cluster.kubectl("delete", "pod", "orphan", "--force", "--grace-period=0", check=False)


def test_a_node_whose_test_process_and_agent_both_die_is_swept(cluster, tmp_path):
    name = f"gcu-{RUN}-lost"
    try:
        with CrashingStarter(cluster, tmp_path, name) as starter:
            state = starter.state
            starter.run_pod("lost")
            from devtools.realnode import sweep_lock, sweep_stale
            # Held from the kills to our sweep: a node with a dead starter and agent is any sweep's to take, and
            # scripts/gcu-stack's (test_setup_path, in parallel) did take it midway in two rehearsals.
            with sweep_lock():
                os.kill(state["pids"]["agent"], signal.SIGKILL)   # the agent first: nobody is left to clean up
                starter.die()
                time.sleep(1)
                left = leftovers(state)
                # What the sweep is for: the namespace and host link stay. (The node's containers do not: when
                # containerd's supervisor is killed, the kernel ends the PID namespace they are in.)
                assert left["netns"] and left["interfaces"], left
                assert sweep_stale(min_age=0, only=[name], log=lambda m: None) == [name]
            assert not any(leftovers(state).values()), leftovers(state)
    finally:
        cluster.kubectl("delete", "node", name, check=False)
        cluster.kubectl("delete", "pod", "lost", "--force", "--grace-period=0", check=False)


def test_no_api_server_is_a_clear_error_and_creates_nothing(tmp_path):
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    node = RealNode(tmp_path / "node", f"gcu-{RUN}-nocluster", dead)
    with pytest.raises(RealNodeError, match=rf"gcu-{RUN}-nocluster.*does not answer.*Start the cluster first"):
        node.start(timeout=30)
    assert not any(node.leftovers().values())


def test_the_machine_is_as_before(machine_before, tmp_path_factory):
    """After every real node of this module (also the killed ones): nothing of real nodes on the machine."""
    from devtools import realnode

    assert not [link for link in _machine_links() if link.startswith(realnode.LINK_PREFIX)
                and link not in machine_before["links"]]
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []   # the last node's teardown removes it
    assert [n for n in netns if RUN in n] == []
    others = any(n.startswith(realnode.NETNS_PREFIX) for n in netns)   # another run's real node still runs
    mountinfo = Path("/proc/self/mountinfo").read_text()
    # Mounted now but not before, with no real node left: ours. (Mounted before and gone now: the last node's teardown
    # unmounted one that an earlier run had left.)
    assert not (" /run/netns " in mountinfo and not machine_before["run-netns-mount"]) or others, \
        "a real node left /run/netns mounted"
    # Nothing of ours mounted: not a node's own (gcu-realnode-*), nothing under this module's folders. (Other modules'
    # servers run side by side: a dockerd's data root and overlays are mounted under their folders.)
    assert "gcu-realnode" not in mountinfo
    assert mounts_under([str(tmp_path_factory.getbasetemp())]) == []
    # the k8s.io cgroup parents real nodes made are gone unless another real node still runs
    assert not realnode._CGROUP_MARKER.exists() or others
    assert not any(Path("/dev").glob("gcu*")) and not os.path.lexists("/dev/termination-log")
