"""What each GCU component is, described once.

A component is data: its spec key, default name and image, the containers it
runs and the host access each needs, the RBAC it needs, what it exposes and what
it waits for. `components/component.py` builds every one of them with the same
code; nothing here constructs a Kubernetes object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

GCU_PRESENT_LABEL = "enflame.com/gcu.present"
NFD_PCI_LABEL = "feature.node.kubernetes.io/pci-1e36.present"
GCU_RESOURCE = "enflame.com/gcu"
DEPLOY_LABEL_PREFIX = "enflame.com/gcu.deploy."
OPERANDS_LABEL = DEPLOY_LABEL_PREFIX + "operands"
DEFAULT_REPOSITORY = "artifact.enflame.cn/enflame_docker_images/enflame"
DEFAULT_VERSION = "latest"
DEFAULT_PULL_POLICY = "IfNotPresent"
DEFAULT_NAMESPACE = "kube-system"
# Links of the chain that are not spec components: the GCU-node labels (after NFD).
GCU_NODES = "gcuNodes"
EXPORTER_NODE_PORT = 30940
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"


@dataclass(frozen=True)
class HostMount:
    """A hostPath volume mounted into a container."""

    name: str
    host_path: str
    mount_path: str
    read_only: bool = True
    type: str = "Directory"


@dataclass(frozen=True)
class Resources:
    cpu_request: str = "10m"
    memory_request: str = "32Mi"
    cpu_limit: str = "200m"
    memory_limit: str = "128Mi"


@dataclass(frozen=True)
class ContainerDef:
    name: str
    # The spec sub-part (e.g. "master") supplying image/env; None: the component itself.
    part: Optional[str] = None
    default_image: Optional[str] = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    ports: tuple[tuple[str, int], ...] = ()
    # Only components that change the host itself get a privileged container.
    privileged: bool = False
    mounts: tuple[HostMount, ...] = ()
    resources: Resources = Resources()
    # Files from the component's ConfigMap, mounted read-only at this directory.
    config_mount: Optional[str] = None


@dataclass(frozen=True)
class RbacDef:
    """Cluster-wide permissions; the ServiceAccount, ClusterRole and binding are the component's own."""

    rules: tuple[dict, ...]
    # Fixed names (NFD keeps gcu-operator's); None: derived from the workload name.
    service_account: Optional[str] = None
    cluster_role: Optional[str] = None
    binding: Optional[str] = None


@dataclass(frozen=True)
class NodePortDef:
    port_name: str
    port: int
    node_port: int


@dataclass(frozen=True)
class ComponentDef:
    key: str  # the spec key, also the status entry's name
    type_name: str  # gcu:components:<type_name>
    default_name: str
    default_image: str
    containers: tuple[ContainerDef, ...]
    # Direct predecessors in the chain. A predecessor that is not deployed is replaced
    # by its own predecessors, so a component waits for the nearest deployed one.
    after: tuple[str, ...] = ()
    kind: str = "DaemonSet"
    default_namespace: str = DEFAULT_NAMESPACE
    # Without a nodeSelector in the spec, select nodes labelled enflame.com/gcu.present=true.
    gcu_nodes_only: bool = True
    host_pid: bool = False
    rbac: Optional[RbacDef] = None
    node_port: Optional[NodePortDef] = None
    # Key of an extra-objects builder in components/extras.py (CRDs, rules, config).
    extras: Optional[str] = None


_DEV = HostMount("dev", "/dev", "/dev")
_SYS = HostMount("sys", "/sys", "/host/sys")
_DEVICE_PLUGINS = HostMount("device-plugins", KUBELET_DEVICE_PLUGINS, KUBELET_DEVICE_PLUGINS, read_only=False)
_GCU_LOGS = HostMount("gcu-logs", "/var/log/topscloud", "/var/log/topscloud", read_only=False, type="DirectoryOrCreate")

NFD = ComponentDef(
    key="nfd",
    type_name="NodeFeatureDiscovery",
    # The seed's field table gives this default; its example blueprint names it explicitly.
    default_name="node-feature-discovery-ds",
    default_image="node-feature-discovery",
    gcu_nodes_only=False,  # it must run everywhere: it is what finds the GCU nodes
    containers=(
        ContainerDef(
            name="nfd-master",
            part="master",
            command=("nfd-master",),
            # One master per node, next to its worker (gcu-operator's layout). The
            # extra namespace lets the GCU rule set enflame.com/gcu.present.
            args=("-port=8080", "-extra-label-ns=enflame.com", "-featurerules-controller=true"),
            resources=Resources("10m", "32Mi", "200m", "128Mi"),
        ),
        ContainerDef(
            name="nfd-worker",
            part="worker",
            command=("nfd-worker",),
            args=("-server=127.0.0.1:8080", "-config=/etc/kubernetes/node-feature-discovery/nfd-worker.conf"),
            mounts=(
                HostMount("host-boot", "/boot", "/host-boot"),
                HostMount("host-os-release", "/etc/os-release", "/host-etc/os-release", type="File"),
                HostMount("host-sys", "/sys", "/host-sys"),
                HostMount("host-usr-lib", "/usr/lib", "/host-usr/lib"),
            ),
            resources=Resources("10m", "32Mi", "200m", "128Mi"),
            config_mount="/etc/kubernetes/node-feature-discovery",
        ),
    ),
    rbac=RbacDef(
        rules=(
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "update"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
            {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeaturerules"], "verbs": ["get", "list", "watch"]},
        ),
        service_account="nfd-service-account",
        cluster_role="nfd-clusterrole",
        binding="nfd-clusterrolebinding",
    ),
    extras="nfd",
)

DRIVER = ComponentDef(
    key="driver",
    type_name="Driver",
    default_name="enflame-gcu-driver",
    default_image="gcu-driver",
    after=(GCU_NODES,),
    host_pid=True,  # the installer loads kernel modules in the host's namespaces
    containers=(
        ContainerDef(
            name="gcu-driver",
            # Privileged: it builds and loads the kernel module (insmod) and creates /dev nodes.
            privileged=True,
            mounts=(
                HostMount("lib-modules", "/lib/modules", "/lib/modules", read_only=False),
                HostMount("usr-src", "/usr/src", "/usr/src"),
                HostMount("dev", "/dev", "/dev", read_only=False),
                HostMount("host-os-release", "/etc/os-release", "/host-etc/os-release", type="File"),
                _GCU_LOGS,
            ),
            resources=Resources("100m", "128Mi", "2", "2Gi"),
        ),
    ),
)

TOOLKIT = ComponentDef(
    key="toolkit",
    type_name="Toolkit",
    default_name="enflame-gcu-docker-plugin",
    default_image="gcu-runtime",
    after=("driver",),
    host_pid=True,  # to signal the host's dockerd after changing its runtime config
    containers=(
        ContainerDef(
            name="gcu-runtime",
            # Privileged: it installs the enflame runtime on the host and rewrites docker's daemon.json.
            privileged=True,
            mounts=(
                HostMount("docker-config", "/etc/docker", "/host/etc/docker", read_only=False, type="DirectoryOrCreate"),
                HostMount("runtime-install", "/usr/local/enflame", "/host/usr/local/enflame", read_only=False, type="DirectoryOrCreate"),
                # docker.sock and docker.pid, to verify and signal the host's dockerd.
                HostMount("host-run", "/run", "/host/run", read_only=False),
                _GCU_LOGS,
            ),
            resources=Resources("50m", "64Mi", "500m", "256Mi"),
        ),
    ),
    extras="toolkit",
)

DEVICE_PLUGIN = ComponentDef(
    key="devicePlugin",
    type_name="DevicePlugin",
    default_name="enflame-gcu-k8s-plugin",
    default_image="gcu-plugin",
    after=("toolkit",),
    containers=(
        ContainerDef(
            name="gcu-plugin",
            args=(f"--resource-name={GCU_RESOURCE}",),
            mounts=(_DEVICE_PLUGINS, _DEV),
            resources=Resources("10m", "32Mi", "200m", "128Mi"),
        ),
    ),
)

EXPORTER = ComponentDef(
    key="exporter",
    type_name="Exporter",
    default_name="enflame-gcu-exporter",
    default_image="gcu-exporter",
    after=("devicePlugin", "gcusharePlugin"),
    containers=(
        ContainerDef(
            name="gcu-exporter",
            args=("--port=9400", "--path=/metrics"),
            ports=(("metrics", 9400),),
            mounts=(_DEV, _SYS),
            resources=Resources("20m", "64Mi", "500m", "256Mi"),
        ),
    ),
    node_port=NodePortDef("metrics", 9400, EXPORTER_NODE_PORT),
    extras="exporter",
)

GFD = ComponentDef(
    key="gfd",
    type_name="GcuFeatureDiscovery",
    default_name="enflame-gcu-feature-discovery",
    default_image="gcu-gfd",
    after=("devicePlugin", "gcusharePlugin"),
    containers=(
        ContainerDef(
            name="gcu-feature-discovery",
            args=("--sleep-interval=60s",),
            mounts=(_DEV, _SYS),
            resources=Resources("10m", "32Mi", "200m", "128Mi"),
        ),
    ),
    # Exactly what labelling its own node takes: read it and patch its labels.
    rbac=RbacDef(rules=({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},)),
)

CORE = (NFD, DRIVER, TOOLKIT, DEVICE_PLUGIN, EXPORTER, GFD)
