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
EXPORTER_PORT = 9400
EXPORTER_NODE_PORT = 30940
GCUSHARE_RESOURCE = "enflame.com/gcu-memory"
GCUSHARE_EXTENDER_PORT = 32766
GCUSHARE_EXTENDER_NODE_PORT = 32766  # defaults of the gcu-stack:*NodePort settings
NIGHTINGALE_WEB_NODE_PORT = 30018
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
    # The spec sub-part (e.g. NFD's "master") supplying image/env; None: the workload's part.
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
    # A readiness probe, so `pulumi up` returns only when the workload serves.
    readiness: Optional[dict] = None
    # (env var, key) pairs read from the component's Secret: credentials never sit in env values.
    secret_env: tuple[tuple[str, str], ...] = ()
    # Mount path of the component's PersistentVolumeClaim.
    claim_mount: Optional[str] = None
    # Meets Pod Security "restricted": non-root, default seccomp profile.
    restricted: bool = False


@dataclass(frozen=True)
class RbacDef:
    """Cluster-wide permissions; the ServiceAccount, ClusterRole and binding are the component's own."""

    rules: tuple[dict, ...]
    # Fixed names (NFD keeps gcu-operator's); None: derived from the workload name.
    service_account: Optional[str] = None
    cluster_role: Optional[str] = None
    binding: Optional[str] = None


@dataclass(frozen=True)
class ServiceDef:
    """A Service in front of a workload: ClusterIP, or NodePort when a node port is given."""

    port_name: str
    port: int
    node_port: Optional[int] = None
    # The stack option (components/settings.py) that sets the node port instead.
    node_port_option: Optional[str] = None


@dataclass(frozen=True)
class WorkloadDef:
    containers: tuple[ContainerDef, ...]
    kind: str = "DaemonSet"
    # The spec sub-part holding this workload's BaseFields (Nightingale's "agentd-deploy").
    part: Optional[str] = None
    # None: the component's own name.
    default_name: Optional[str] = None
    host_pid: bool = False
    service: Optional[ServiceDef] = None
    # Deployments: Recreate for a single writer of a ReadWriteOnce volume (MySQL).
    recreate: bool = False


@dataclass(frozen=True)
class ComponentDef:
    key: str  # the spec key, also the status entry's name
    type_name: str  # gcu:components:<type_name>
    default_name: str
    default_image: str
    workloads: tuple[WorkloadDef, ...]
    # Direct predecessors in the chain. A predecessor that is not deployed is replaced
    # by its own predecessors, so a component waits for the nearest deployed one.
    after: tuple[str, ...] = ()
    default_namespace: str = DEFAULT_NAMESPACE
    # Without a nodeSelector in the spec, select nodes labelled enflame.com/gcu.present=true.
    gcu_nodes_only: bool = True
    rbac: Optional[RbacDef] = None
    # Key of an extra-objects builder in components/extras.py (CRDs, rules, config, charts).
    extras: Optional[str] = None
    # Pod Security level for a namespace the stack creates for it; None: derived from host access.
    pod_security: Optional[str] = None


_DEV = HostMount("dev", "/dev", "/dev")
_SYS = HostMount("sys", "/sys", "/host/sys")
_DEVICE_PLUGINS = HostMount("device-plugins", KUBELET_DEVICE_PLUGINS, KUBELET_DEVICE_PLUGINS, read_only=False)
_GCU_LOGS = HostMount("gcu-logs", "/var/log/topscloud", "/var/log/topscloud", read_only=False, type="DirectoryOrCreate")


def _one(container: ContainerDef, **workload: object) -> tuple[WorkloadDef, ...]:
    """The usual shape: one workload running one container."""
    return (WorkloadDef(containers=(container,), **workload),)  # type: ignore[arg-type]


def _tcp_ready(port: int) -> dict:
    return {"tcpSocket": {"port": port}, "initialDelaySeconds": 5, "periodSeconds": 10}


def _http_ready(path: str, port: int) -> dict:
    return {"httpGet": {"path": path, "port": port}, "initialDelaySeconds": 5, "periodSeconds": 10}


NFD = ComponentDef(
    key="nfd",
    type_name="NodeFeatureDiscovery",
    # The seed's field table gives this default; its example blueprint names it explicitly.
    default_name="node-feature-discovery-ds",
    default_image="node-feature-discovery",
    gcu_nodes_only=False,  # it must run everywhere: it is what finds the GCU nodes
    workloads=(
        WorkloadDef(
            containers=(
                ContainerDef(
                    name="nfd-master",
                    part="master",
                    command=("nfd-master",),
                    # One master per node, next to its worker (gcu-operator's layout). The
                    # extra namespace lets the GCU rule set enflame.com/gcu.present.
                    args=("-port=8080", "-extra-label-ns=enflame.com", "-featurerules-controller=true"),
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
                    config_mount="/etc/kubernetes/node-feature-discovery",
                ),
            ),
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
    workloads=_one(
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
        host_pid=True,  # the installer loads kernel modules in the host's namespaces
    ),
)

TOOLKIT = ComponentDef(
    key="toolkit",
    type_name="Toolkit",
    default_name="enflame-gcu-docker-plugin",
    default_image="gcu-runtime",
    after=("driver",),
    workloads=_one(
        ContainerDef(
            name="gcu-runtime",
            # Privileged: it installs the enflame runtime on the host and rewrites docker's daemon.json.
            privileged=True,
            # Plus the directories of daemon.json, docker.sock and docker.pid, which
            # follow gcu-stack:dockerRuntime (components/extras.py).
            mounts=(
                HostMount("runtime-install", "/usr/local/enflame", "/host/usr/local/enflame", read_only=False, type="DirectoryOrCreate"),
                _GCU_LOGS,
            ),
            resources=Resources("50m", "64Mi", "500m", "256Mi"),
        ),
        host_pid=True,  # to signal the host's dockerd after changing its runtime config
    ),
    extras="toolkit",
)

DEVICE_PLUGIN = ComponentDef(
    key="devicePlugin",
    type_name="DevicePlugin",
    default_name="enflame-gcu-k8s-plugin",
    default_image="gcu-plugin",
    after=("toolkit",),
    workloads=_one(
        ContainerDef(
            name="gcu-plugin",
            args=(f"--resource-name={GCU_RESOURCE}",),
            mounts=(_DEVICE_PLUGINS, _DEV),
        ),
    ),
)

EXPORTER = ComponentDef(
    key="exporter",
    type_name="Exporter",
    default_name="enflame-gcu-exporter",
    default_image="gcu-exporter",
    after=("devicePlugin", "gcusharePlugin"),
    workloads=_one(
        ContainerDef(
            name="gcu-exporter",
            args=(f"--port={EXPORTER_PORT}", "--path=/metrics"),
            ports=(("metrics", EXPORTER_PORT),),
            mounts=(_DEV, _SYS),
            resources=Resources("20m", "64Mi", "500m", "256Mi"),
        ),
        service=ServiceDef("metrics", EXPORTER_PORT, node_port=EXPORTER_NODE_PORT),
    ),
    extras="exporter",
)

GFD = ComponentDef(
    key="gfd",
    type_name="GcuFeatureDiscovery",
    default_name="enflame-gcu-feature-discovery",
    default_image="gcu-gfd",
    after=("devicePlugin", "gcusharePlugin"),
    workloads=_one(
        ContainerDef(name="gcu-feature-discovery", args=("--sleep-interval=60s",), mounts=(_DEV, _SYS)),
    ),
    # Exactly what labelling its own node takes: read it and patch its labels.
    rbac=RbacDef(rules=({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},)),
)

GCUSHARE_PLUGIN = ComponentDef(
    key="gcusharePlugin",
    type_name="GcuSharePlugin",
    default_name="gcushare-device-plugin",
    default_image="gcushare-device-plugin",
    # It takes the device plugin's place in the chain.
    after=("toolkit",),
    workloads=_one(
        ContainerDef(
            name="gcushare-device-plugin",
            args=(f"--resource-name={GCUSHARE_RESOURCE}",),
            mounts=(_DEVICE_PLUGINS, _DEV),
        ),
    ),
    # Advertise shares on its node and record which GCU a scheduled pod got (pod annotations).
    rbac=RbacDef(
        rules=(
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        )
    ),
    extras="gcushare_plugin",
)

GCUSHARE_SCHEDULER = ComponentDef(
    key="gcushareScheduler",
    type_name="GcuShareSchedulerExtender",
    default_name="gcushare-scheduler-extender",
    default_image="gcushare-scheduler-extender",
    after=("gcusharePlugin",),
    gcu_nodes_only=False,  # a control-plane helper, not a node agent
    workloads=(
        WorkloadDef(
            kind="Deployment",
            containers=(
                ContainerDef(
                    name="gcushare-scheduler-extender",
                    args=(f"--port={GCUSHARE_EXTENDER_PORT}",),
                    ports=(("http", GCUSHARE_EXTENDER_PORT),),
                    readiness=_tcp_ready(GCUSHARE_EXTENDER_PORT),
                    restricted=True,
                ),
            ),
            # kube-scheduler runs on the host network: a node port is what it can reach.
            service=ServiceDef("http", GCUSHARE_EXTENDER_PORT, node_port_option="gcushare_scheduler_node_port"),
        ),
    ),
    # Least privilege for filter + bind: read nodes and pods, annotate pods, bind them, report events.
    rbac=RbacDef(
        rules=(
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        )
    ),
)


def _nightingale(part: str, image: str, port: Optional[int], recreate: bool = False, **container: object) -> WorkloadDef:
    service = ServiceDef("http" if part != "mysql" else "mysql", port) if port else None
    return WorkloadDef(
        kind="Deployment",
        part=part,
        default_name=part,
        recreate=recreate,
        containers=(
            ContainerDef(
                name=part,
                default_image=image,
                ports=((service.port_name, port),) if service else (),
                restricted=True,
                **container,  # type: ignore[arg-type]
            ),
        ),
        service=service,
    )


NIGHTINGALE_DB_SECRET_KEY = "password"

NIGHTINGALE = ComponentDef(
    key="nightingale",
    type_name="Nightingale",
    default_name="nightingale",
    default_image="nightingale",
    default_namespace="enflame",
    gcu_nodes_only=False,
    after=("exporter",),
    workloads=(
        _nightingale("agentd", "agentd", None, resources=Resources("20m", "64Mi", "500m", "256Mi")),
        _nightingale(
            "mysql",
            "mysql",
            3306,
            recreate=True,
            readiness=_tcp_ready(3306),
            secret_env=(("MYSQL_ROOT_PASSWORD", NIGHTINGALE_DB_SECRET_KEY),),
            claim_mount="/var/lib/mysql",
            resources=Resources("100m", "256Mi", "1", "1Gi"),
        ),
        _nightingale("redis", "redis", 6379, readiness=_tcp_ready(6379), resources=Resources("50m", "64Mi", "500m", "256Mi")),
        _nightingale(
            "prometheus",
            "prometheus",
            9090,
            args=("--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"),
            readiness=_http_ready("/-/ready", 9090),
            config_mount="/etc/prometheus",
            resources=Resources("100m", "256Mi", "1", "1Gi"),
        ),
        _nightingale(
            "nserver",
            "nserver",
            19000,
            readiness=_tcp_ready(19000),
            secret_env=(("MYSQL_PASSWORD", NIGHTINGALE_DB_SECRET_KEY),),
            resources=Resources("50m", "128Mi", "1", "512Mi"),
        ),
        WorkloadDef(
            kind="Deployment",
            part="nwebapi",
            default_name="nwebapi",
            containers=(
                ContainerDef(
                    name="nwebapi",
                    default_image="nwebapi",
                    ports=(("http", 18000),),
                    readiness=_tcp_ready(18000),
                    secret_env=(("MYSQL_PASSWORD", NIGHTINGALE_DB_SECRET_KEY),),
                    resources=Resources("50m", "128Mi", "1", "512Mi"),
                    restricted=True,
                ),
            ),
            # The web UI, reachable from outside the cluster.
            service=ServiceDef("http", 18000, node_port_option="nightingale_web_node_port"),
        ),
    ),
    extras="nightingale",
)

VOLCANO = ComponentDef(
    key="volcano",
    type_name="Volcano",
    default_name="volcano",
    default_image="vc-controller-manager",
    default_namespace="volcano-system",
    gcu_nodes_only=False,
    after=("devicePlugin", "gcusharePlugin"),
    # Upstream's own chart (CRDs, admission webhook and its certificates): one Helm release.
    workloads=(),
    extras="volcano",
    # The chart's pods do not all set restricted-level security contexts.
    pod_security="baseline",
)

ALL = (NFD, DRIVER, TOOLKIT, DEVICE_PLUGIN, GCUSHARE_PLUGIN, EXPORTER, GFD, GCUSHARE_SCHEDULER, VOLCANO, NIGHTINGALE)
