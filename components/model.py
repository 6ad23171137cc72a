"""The vocabulary a component is described in: plain, frozen data.

A component module under `components/catalog/` builds one `ComponentDef` from
these types; the shared code (`resolve`, `plan`, `component`, `stack`)
turns any `ComponentDef` into Kubernetes objects. `resolve` fills the Resolved*
types at the end from a blueprint's spec. Nothing here declares a resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    import pulumi
    from pydantic import BaseModel

    from .spec import BaseFields


@dataclass(frozen=True)
class HostMount:
    """A hostPath volume mounted into a container."""

    name: str
    host_path: str
    mount_path: str
    read_only: bool = True
    type: str = "Directory"


@dataclass(frozen=True)
class ClaimMount:
    """An operator's PersistentVolumeClaim (in the component's namespace) mounted read-write into a container."""

    name: str
    claim: str
    mount_path: str


@dataclass(frozen=True)
class SecretMount:
    """An operator's Secret (in the component's namespace) mounted read-only as files, one per key."""

    name: str
    secret: str
    mount_path: str


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
    # Where the component's Secret is mounted read-only as files (one per key), for programs that read a file.
    secret_mount: Optional[str] = None
    # (env var, pod field) pairs from the downward API, besides NODE_NAME which every container gets.
    pod_env: tuple[tuple[str, str], ...] = ()
    # Mount path of the component's PersistentVolumeClaim.
    claim_mount: Optional[str] = None
    # A directory the program writes to, as an emptyDir: the image's own directory there belongs to its own user.
    scratch_mount: Optional[str] = None
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
class NodePort:
    """A node port: fixed, or a stack setting of the component (`gcu-stack:<setting>`) with a default."""

    default: int
    setting: Optional[str] = None

    def owner(self, component_key: str) -> str:
        """How an error names who claims this port."""
        return f"gcu-stack:{self.setting}" if self.setting else f"spec.{component_key} (fixed {self.default})"


@dataclass(frozen=True)
class ServiceDef:
    """A Service in front of a workload: ClusterIP, or NodePort when a node port is given."""

    port_name: str
    port: int
    node_port: Optional[NodePort] = None
    # Prometheus scrapes this Service (Nightingale's Prometheus, when deployed).
    metrics_path: Optional[str] = None


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
    # DaemonSets: OnDelete; the component's step replaces the pods node by node (the driver's upgrade).
    on_delete: bool = False


AGENT_ENTRYPOINT = "/usr/local/bin/gcu-agent"


@dataclass(frozen=True)
class ImageDef:
    """How the component's image is built from `images/` (see images/README.md for the same table)."""

    package: str  # glob matched in packageDir; exactly one file must match
    source: str  # where the user gets that package
    # The program the package holds (installed as /usr/bin/<binary> by the agent Dockerfile); None: the
    # package is itself what runs (the driver installer).
    binary: Optional[str]
    # images/<dockerfile>/Dockerfile; the agent images share one, parametrised by build args.
    dockerfile: str = "agent"
    # The image's ENTRYPOINT, i.e. what the component's container executes (for an agent: a link to its binary).
    entrypoint: str = AGENT_ENTRYPOINT
    base_image: str = "ubuntu:18.04"  # the seed's build system: "nameID: ubuntu18.04"
    build_args: tuple[tuple[str, str], ...] = ()
    extra_files: tuple[tuple[str, Path], ...] = ()  # (name in the context, file)
    # The package is made by this project (`scripts/gcu-stack package-service`), not an Enflame release: tests build
    # the image from the real package (tests/test_upgrade_manager_image.py), not from a stand-in.
    made_here: bool = False


@dataclass(frozen=True)
class PodAdditions:
    """What a component's extras add to its pods."""

    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    # Only these nodes (by name); empty: every node the selector allows.
    node_names: tuple[str, ...] = ()
    secret_name: Optional[str] = None
    # Secrets whose every key becomes an environment variable of each container (credentials an operator supplies).
    env_from_secrets: tuple[str, ...] = ()
    claim_name: Optional[str] = None
    # Host directories that depend on stack settings (the toolkit's docker paths).
    mounts: tuple[HostMount, ...] = ()
    # Claims that depend on stack settings (the upgrade service's stacks directory on a PersistentVolume).
    claims: tuple[ClaimMount, ...] = ()
    # Secrets besides the component's own that depend on stack settings (the upgrade service's TLS certificate).
    secret_mounts: tuple[SecretMount, ...] = ()
    # The readiness probe, when stack settings change it (the upgrade service over HTTPS); None: the container's.
    readiness: Optional[dict] = None


@dataclass
class Extras:
    """Objects particular to one component, declared before its workloads (CRDs first)."""

    config_files: dict[str, str] = field(default_factory=dict)
    crds: list[dict] = field(default_factory=list)
    custom_resources: list[dict] = field(default_factory=list)
    # Plain objects the workloads need first (Secrets, PersistentVolumes, claims).
    objects: list[dict] = field(default_factory=list)
    # Helm releases: arguments of pulumi_kubernetes.helm.v3.Release.
    releases: list[dict] = field(default_factory=list)
    pod: PodAdditions = field(default_factory=PodAdditions)


@dataclass(frozen=True)
class BuildContext:
    """The few stack-wide facts a component's own builders may read, besides its own settings."""

    instance: str  # metadata.name of the GcuResource
    settings: Any  # the component's own settings model (ComponentDef.settings), or None
    # (job, "host:port", path) of every deployed Service that publishes metrics, for Prometheus.
    scrape_targets: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class ClusterAccess:
    """How bundled resources reach the cluster: the stack's kubeconfig (path, or content as a secret) and context."""

    kubeconfig: Any = None
    context: Optional[str] = None
    uid: Any = None  # the cluster's recorded identity (ClusterGuard's kube-system UID), an Output


@dataclass
class StepContext:
    """What a step's `declare` gets."""

    parent: "pulumi.Resource"  # the stack, or the component owning the step
    after: list  # resources the step waits for (predecessors' gates; an owner's workloads)
    settings: Any  # the step's own settings model, or None
    cluster: ClusterAccess
    host_provider: "pulumi.ProviderResource"  # the bundled dynamic provider, configured with nothing
    deployed: tuple  # every deployed ResolvedComponent
    results: dict  # earlier steps' StepResults, by step key
    owner: Any = None  # the GcuComponent of a component's step (its resolved spec, namespace, workloads)
    instance: str = ""  # metadata.name of the GcuResource


@dataclass(frozen=True)
class StepDef:
    """A link of the chain that is not a Kubernetes workload: it declares a bundled resource.

    `declare(step_context)` returns the resource successors wait for and whether the
    step is done (for status). A step owned by a component (`ComponentDef.then`) runs
    after that component's workloads, and the component's successors wait for it.
    """

    key: str
    after: tuple[str, ...]
    declare: Callable[[StepContext], "StepResult"]
    # Stack settings of this step (a pydantic model whose aliases are `gcu-stack:` keys).
    settings: Optional[type["BaseModel"]] = None
    # A standalone step is part of the stack when any of these components is deployed;
    # empty: whenever any component is.
    with_any: tuple[str, ...] = ()
    # The stack outputs it contributes, with their values when the step is not part of the stack.
    empty_outputs: tuple[tuple[str, Any], ...] = ()


@dataclass
class StepResult:
    resource: "pulumi.Resource"
    done: "pulumi.Output[bool]"
    # Further resources successors wait for (a step declared once per node pool: the pools' own).
    also: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)  # stack outputs it contributes
    facts: dict = field(default_factory=dict)  # plain values later steps may read (e.g. which nodes are GCU nodes)
    # A GcuResource condition it reports (a driver upgrade's: action "upgrade", with progress), or None.
    condition: Optional["pulumi.Output[Optional[dict]]"] = None


@dataclass(frozen=True)
class Variant:
    """A component's layout from one upstream version on, where its programs changed shape (other flags, objects,
    topology): NFD v0.14 dropped gRPC between worker and master for NodeFeature objects."""

    since: tuple[int, int]  # the (major, minor) of the image version it starts at
    name: str  # how previews and errors call it
    workloads: tuple[WorkloadDef, ...]
    rbac: Optional[RbacDef] = None


@dataclass(frozen=True)
class ComponentDef:
    key: str  # the spec key, also the status entry's name
    type_name: str  # gcu:components:<type_name>
    default_name: str
    default_image: str
    workloads: tuple[WorkloadDef, ...]
    # Direct predecessors in the chain (components or steps). A predecessor that is not
    # deployed is replaced by its own predecessors, so a link waits for the nearest deployed one.
    after: tuple[str, ...] = ()
    default_namespace: str = "kube-system"
    # Without a nodeSelector in the spec, select nodes labelled enflame.com/gcu.present=true,
    # and honour the per-node deploy labels (a GCU node agent).
    gcu_nodes_only: bool = True
    rbac: Optional[RbacDef] = None
    # The blueprint model of spec.<key> (BaseFields, or a subclass with the component's own fields).
    spec_model: Optional[type["BaseModel"]] = None
    # Other names of spec.<key> in old blueprints (the seed's field table calls the device plugin `plugin`).
    spec_aliases: tuple[str, ...] = ()
    # Components that cannot be deployed together with this one.
    excludes: tuple[str, ...] = ()
    # Stack settings of this component (a pydantic model whose aliases are `gcu-stack:` keys).
    settings: Optional[type["BaseModel"]] = None
    # Objects particular to this component (CRDs, rules, config, storage, charts) and pod additions.
    extras: Optional[Callable[["ResolvedComponent", BuildContext], Extras]] = None
    # Cross-field checks on the component and its settings, before any resource: messages naming the field.
    checks: Optional[Callable[["ResolvedComponent", Any], list[str]]] = None
    # Stack outputs this component adds (e.g. the scheduler extender's URL).
    outputs: Optional[Callable[["ResolvedComponent", Any], dict]] = None
    # How its image is built from images/ with pulumi-docker; None: not built here.
    image: Optional[ImageDef] = None
    # A step that runs after the workloads; successors wait for it (the toolkit's runtime activation).
    then: Optional[StepDef] = None
    # A step the workloads wait for, so that destroy deletes it after them (NFD's labels, taken off the nodes).
    before: Optional[StepDef] = None
    # It installs the GCU driver: with it deployed, GCU nodes need no pre-installed driver.
    installs_driver: bool = False
    # A node agent holding the GCU device: paused on a node while that node's driver is replaced.
    uses_device: bool = False
    # Pod Security level for a namespace the stack creates for it; None: derived from host access.
    pod_security: Optional[str] = None
    # Newer layouts (oldest first), chosen by the version of the image the spec asks for; the version unset or
    # "latest": the newest. `workloads`, `rbac` and `layout` describe the layout before the first of them.
    variants: tuple[Variant, ...] = ()
    layout: str = ""


# ---------------------------------------------------------------------------- resolved (components/resolve.py)


@dataclass(frozen=True)
class ResolvedContainer:
    definition: ContainerDef
    image: str
    pull_policy: str
    env: tuple[tuple[str, str], ...]
    # Where the values came from, for error messages: blueprint field paths ("spec.nfd.master.image"),
    # or "<path> (unset: default ...)" where the catalog's default applied.
    image_from: tuple[str, ...] = ()
    env_from: Optional[str] = None  # the env list used (spec.<key>.env or a sub-part's)
    # The image's parts as resolved: (repository, image, version), version None when defaulted.
    image_parts: tuple[str, str, Optional[str]] = ("", "", None)


@dataclass(frozen=True)
class ResolvedWorkload:
    definition: WorkloadDef
    name: str
    node_selector: Optional[dict[str, str]]
    containers: tuple[ResolvedContainer, ...]
    name_from: str = ""  # the field naming it, e.g. "spec.nightingale.redis-deploy.name"
    # The node pool (spec.<key>.pools) it serves, and that pool's nodeSelector; None: the component's own workload.
    pool: Optional[str] = None
    pool_selector: dict[str, str] = field(default_factory=dict)
    # The component's own workload when the spec has `pools` (even []): their nodeSelectors, whose nodes it leaves to
    # them. None: no pools key, the workload is as it always was.
    other_pools: Optional[tuple[dict[str, str], ...]] = None


@dataclass(frozen=True)
class ResolvedComponent:
    definition: ComponentDef
    spec: BaseFields
    name: str
    namespace: str
    workloads: tuple[ResolvedWorkload, ...]
    name_from: str = ""  # "spec.<key>.name", or "spec.<key>.name (unset: default '<name>')"
    namespace_from: str = ""
    # The layout its image versions chose (ComponentDef.variants); None: the definition's own.
    variant: Optional[Variant] = None
    # Why the versions chose no single layout (the fields named); empty when they agree.
    variant_problems: tuple[str, ...] = ()

    @property
    def rbac(self) -> Optional[RbacDef]:
        return self.variant.rbac if self.variant is not None else self.definition.rbac

    @property
    def layout(self) -> str:
        return self.variant.name if self.variant is not None else self.definition.layout

    @property
    def containers(self) -> tuple[ResolvedContainer, ...]:
        return tuple(c for w in self.workloads for c in w.containers)
