"""gcu-upgrade-manager, in the cluster: the service (`scripts/gcu-stack serve`, service/) as a Deployment on one node.

gum ran on a node and read its blueprints from that node's /topsdata/dcp/gcu-upgrade-manager; so does this, on the
node its nodeSelector names, answering on node port 32765 as gum did. Its image (images/upgrade-manager) holds the
Pulumi CLI, its plugins and this program. The stacks it drives are the operator's: their Pulumi.<stack>.yaml and
state sit in a directory on that node (`upgradeManagerStacksDir`, mounted at the same path, so the CLI run there and
the service are one owner of one backend) or on a PersistentVolume the CLI sees at that path
(`upgradeManagerStateClaim`), or the backend is a URL both are given, its credentials from a second
Secret of the operator's. The bearer token and the secrets passphrase come from a Secret the operator creates; the
stack never holds them.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from ..model import (
    BuildContext,
    ClaimMount,
    ComponentDef,
    ContainerDef,
    Extras,
    HostMount,
    ImageDef,
    NodePort,
    PodAdditions,
    RbacDef,
    ResolvedComponent,
    Resources,
    SecretMount,
    ServiceDef,
    WorkloadDef,
)
from .common import http_ready

PORT = 32765  # gum's, inside the pod as on the node
NODE_PORT = NodePort(32765, setting="upgradeManagerNodePort")
GUM_DIR = "/topsdata/dcp/gcu-upgrade-manager"  # gum's blueprints/ and op-log/ on its node
SECRET_MOUNT = "/etc/gcu-upgrade-manager"
TLS_MOUNT = "/etc/gcu-upgrade-manager-tls"  # beside the token's mount: a Secret's volume holds no other mount point
TOKEN_KEY = "token"
PASSPHRASE_KEY = "passphrase"
ENTRYPOINT = "/usr/local/bin/gcu-upgrade-manager"

READINESS = http_ready("/healthz", PORT)

ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ = ["get", "list", "watch"]

# What `pulumi up` and `destroy` of any blueprint do, and nothing else: the objects the catalog declares (Volcano's
# chart included), what the bundled providers do to nodes and pods, and what pulumi-kubernetes reads while it waits.
# `bind` and `escalate` let it declare the components' ClusterRoles without holding their permissions itself.
RULES: tuple[dict, ...] = (
    {"apiGroups": [""], "resources": ["namespaces", "configmaps", "secrets", "services", "serviceaccounts",
                                      "persistentvolumes", "persistentvolumeclaims"], "verbs": ALL},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": [*READ, "patch", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": [*READ, "create", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": READ},
    {"apiGroups": [""], "resources": ["endpoints"], "verbs": READ},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ},
    {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "statefulsets"], "verbs": ALL},
    {"apiGroups": ["apps"], "resources": ["replicasets", "controllerrevisions"], "verbs": READ},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": [*ALL, "deletecollection"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "clusterrolebindings", "roles",
                                                                "rolebindings"], "verbs": [*ALL, "bind", "escalate"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ALL},
    {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ALL},
    {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeaturerules"], "verbs": ALL},
    {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"], "verbs": READ},
    {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors"], "verbs": ALL},
    {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations",
                                                                   "validatingwebhookconfigurations"], "verbs": ALL},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ALL},
    {"apiGroups": ["scheduling.volcano.sh"], "resources": ["queues"], "verbs": ALL},
)


class UpgradeManagerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_port: int = Field(NODE_PORT.default, alias=NODE_PORT.setting, ge=30000, le=32767)
    # A Secret in the component's namespace with the keys `token` (the bearer token requests carry) and `passphrase`
    # (the stacks' PULUMI_CONFIG_PASSPHRASE), created by the operator.
    secret: str = Field("gcu-upgrade-manager", alias="upgradeManagerSecret", pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")
    # gum's directory on the service's node: blueprints/ (the only place PUT reads) and op-log/.
    data_dir: str = Field(GUM_DIR, alias="upgradeManagerDataDir", pattern=r"^/")
    # The operator's project directory on that node: Pulumi.<stack>.yaml and .state/ (the backend unless a URL).
    stacks_dir: str = Field(f"{GUM_DIR}/gcu-stack", alias="upgradeManagerStacksDir", pattern=r"^/")
    # A PersistentVolumeClaim of the operator's in the component's namespace holding the stacks directory, mounted at
    # stacks_dir in place of the node's directory: the CLI sees the same volume at the same path (a local PV of that
    # path on the service's node, an NFS share mounted there) and stays one owner with the service.
    state_claim: Optional[str] = Field(None, alias="upgradeManagerStateClaim",
                                       pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")
    # A kubernetes.io/tls Secret of the operator's (tls.crt, tls.key): the service answers HTTPS only.
    tls_secret: Optional[str] = Field(None, alias="upgradeManagerTlsSecret", pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")
    # The stacks' backend, when not the file backend in stacks_dir/.state/backend (the CLI is given the same URL).
    backend_url: Optional[str] = Field(None, alias="upgradeManagerBackendUrl")
    # A Secret in the component's namespace, created by the operator, whose every key is an environment variable of
    # the service: the backend URL's credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://,
    # AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY for azblob://, PULUMI_ACCESS_TOKEN for Pulumi Cloud).
    backend_secret: Optional[str] = Field(None, alias="upgradeManagerBackendSecret",
                                          pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")


def backend_url(settings: UpgradeManagerSettings) -> str:
    return settings.backend_url or f"file://{settings.stacks_dir.rstrip('/')}/.state/backend"


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    settings: UpgradeManagerSettings = context.settings
    data = settings.data_dir.rstrip("/")
    stacks = settings.stacks_dir.rstrip("/")
    mounts = (
        HostMount("blueprints", f"{data}/blueprints", f"{GUM_DIR}/blueprints", type="DirectoryOrCreate"),
        HostMount("op-log", f"{data}/op-log", f"{GUM_DIR}/op-log", read_only=False, type="DirectoryOrCreate"),
    )
    # At the same path as the CLI sees it: the backend's file URL and the stacks' recorded paths mean one place.
    claims = (ClaimMount("stacks", settings.state_claim, stacks),) if settings.state_claim else ()
    if not claims:
        mounts += (HostMount("stacks", stacks, stacks, read_only=False, type="DirectoryOrCreate"),)
    backend = backend_url(settings)
    if backend.startswith("file://") and not backend[len("file://"):].startswith(f"{stacks}/"):
        # A file backend elsewhere on the node (the CLI's own): at its path too.
        path = backend[len("file://"):].rstrip("/")
        mounts += (HostMount("backend", path, path, read_only=False, type="DirectoryOrCreate"),)
    tls: tuple[str, ...] = ()
    readiness = None
    if settings.tls_secret:
        tls = (f"--tls-cert={TLS_MOUNT}/tls.crt", f"--tls-key={TLS_MOUNT}/tls.key")
        readiness = {**READINESS, "httpGet": {**READINESS["httpGet"], "scheme": "HTTPS"}}
    return Extras(pod=PodAdditions(
        env={"PULUMI_BACKEND_URL": backend},
        # The service manages a GcuResource through the stack of its name: this one runs the service itself.
        args=(f"--config-dir={stacks}", f"--state-dir={stacks}/.state", f"--own-stack={context.instance}", *tls),
        secret_name=settings.secret,
        env_from_secrets=(settings.backend_secret,) if settings.backend_secret else (),
        mounts=mounts,
        claims=claims,
        secret_mounts=(SecretMount("tls", settings.tls_secret, TLS_MOUNT),) if settings.tls_secret else (),
        readiness=readiness,
    ))


def checks(component: ResolvedComponent, settings: UpgradeManagerSettings) -> list[str]:
    problems = []
    if settings.backend_secret and not settings.backend_url:
        problems.append("gcu-stack:upgradeManagerBackendSecret: the credentials of a backend URL, but the stacks' "
                        "backend is the file backend in upgradeManagerStacksDir; set gcu-stack:upgradeManagerBackendUrl "
                        "to the URL they are for, or remove the setting")
    if not component.spec.node_selector:
        problems.append(f"spec.{UPGRADE_MANAGER.key}.nodeSelector: required: the service reads its blueprints and "
                        "stacks from directories of one node, as gum did; pin it there, e.g. "
                        "{\"kubernetes.io/hostname\": \"<node>\"}")
    return problems


def outputs(component: ResolvedComponent, settings: UpgradeManagerSettings) -> dict:
    (workload,) = component.workloads
    return {"upgradeManager": {
        "service": f"{workload.name}.{component.namespace}",
        "nodePort": settings.node_port,
        "nodeSelector": component.spec.node_selector,
        "backend": backend_url(settings),
        "blueprints": f"{settings.data_dir.rstrip('/')}/blueprints",
        **({"stateClaim": settings.state_claim} if settings.state_claim else {}),
        **({"tlsSecret": settings.tls_secret} if settings.tls_secret else {}),
    }}


UPGRADE_MANAGER = ComponentDef(
    key="upgradeManager",
    type_name="UpgradeManager",
    default_name="gcu-upgrade-manager",
    default_image="gcu-upgrade-manager",
    gcu_nodes_only=False,  # a control-plane service, on the node holding its directories
    workloads=(
        WorkloadDef(
            kind="Deployment",
            recreate=True,  # one writer of the stacks' state at a time
            containers=(
                ContainerDef(
                    name="gcu-upgrade-manager",
                    args=(f"--listen=0.0.0.0:{PORT}", f"--token-file={SECRET_MOUNT}/{TOKEN_KEY}",
                          f"--blueprints={GUM_DIR}/blueprints", f"--oplog={GUM_DIR}/op-log"),
                    ports=(("http", PORT),),
                    readiness=READINESS,
                    secret_env=(("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE_KEY),),
                    secret_mount=SECRET_MOUNT,
                    # A pulumi up: the CLI, the Python program, the Kubernetes provider.
                    resources=Resources("100m", "256Mi", "2", "2Gi"),
                ),
            ),
            service=ServiceDef("http", PORT, node_port=NODE_PORT),
        ),
    ),
    rbac=RbacDef(rules=RULES),
    settings=UpgradeManagerSettings,
    extras=extras,
    checks=checks,
    outputs=outputs,
    image=ImageDef(
        package="gcu-upgrade-manager_*.tar.gz",
        source="make it with `scripts/gcu-stack package-service` (the Pulumi CLI, its plugins and this program)",
        binary=None,
        dockerfile="upgrade-manager",
        entrypoint=ENTRYPOINT,
        base_image="python:3.11-slim-bookworm",
        made_here=True,
    ),
)
