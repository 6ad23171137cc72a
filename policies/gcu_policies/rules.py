"""The gcu-stack CrossGuard rules.

Each rule has a default enforcement level, which a policy config file overrides
(`"<policy>": "advisory"` or `{"enforcementLevel": ...}`), and its own settings in
its config schema, read with `get_config()`. Every message says what to change.
"""

from __future__ import annotations

import re
from functools import partial, wraps
from typing import Any, Callable, Iterator, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from .objects import (
    RUNTIME_TYPES,
    UNKNOWN,
    Pod,
    as_int,
    describe,
    entries,
    get,
    items,
    kind_of,
    pod_of,
    strings,
    under,
)

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY

# The repositories the seed blueprint pulls from.
DEFAULT_REPOSITORIES = [
    "artifact.enflame.cn/enflame_docker_images/enflame",
    "artifact.enflame.cn/galaxy_docker_hub/gcu",
]
FLOATING_TAGS = ["latest"]

ACTIVATION_POD = "gcu-runtime-activate"
# Privileged means every device and capability of the host. Only the components
# that change the host itself get it:
DEFAULT_PRIVILEGED = [
    # builds and loads the GCU kernel module (insmod) and creates the /dev nodes
    "driver",
    # installs the enflame container runtime on the host and rewrites docker's daemon.json
    "toolkit",
    # the one-shot pod ContainerRuntime runs on each node: rewrites daemon.json or containerd's drop-in,
    # signals or restarts the runtime
    ACTIVATION_POD,
]

# Host paths each component may mount (or any path below one): what
# components/catalog/<component>.py mounts, plus the default directories of docker's daemon.json,
# socket and pid file, and of containerd's config.toml, drop-in and socket, for the toolkit and the
# activation pod (gcu-stack:dockerRuntime, gcu-stack:containerd; other paths there need `allowedHostPaths`).
DEFAULT_HOST_PATHS: dict[str, list[str]] = {
    "nfd": ["/boot", "/etc/os-release", "/sys", "/usr/lib"],
    "driver": ["/lib/modules", "/usr/src", "/dev", "/etc/os-release", "/var/log/topscloud"],
    "toolkit": ["/etc/docker", "/etc/containerd", "/usr/local/enflame", "/var/run", "/run", "/var/log/topscloud"],
    "devicePlugin": ["/var/lib/kubelet/device-plugins", "/dev"],
    "gcusharePlugin": ["/var/lib/kubelet/device-plugins", "/dev"],
    "exporter": ["/dev", "/sys"],
    "gfd": ["/dev", "/sys"],
    ACTIVATION_POD: ["/etc/docker", "/etc/containerd", "/var/run", "/run"],
    # gum's directory on its node: blueprints/, op-log/ and (by default) the stacks' directory.
    "upgradeManager": ["/topsdata/dcp/gcu-upgrade-manager"],
}

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
DEFAULT_EXEMPT_NAMESPACES = ["kube-system"]
# Upstream Volcano's chart pods do not all meet "restricted" (components/catalog/volcano.py).
DEFAULT_NAMESPACE_LEVELS = {"volcano-system": "baseline"}

RBAC_KINDS = ("ClusterRole", "Role")
DANGEROUS_VERBS = ("escalate", "bind", "impersonate", "*")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection", "*")
# (API group, resource) pairs whose write access amounts to cluster admin.
PROTECTED_RESOURCES = (
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
)

# gcu-upgrade-manager deploys the stack, ClusterRoles and Volcano's webhooks included: its role is the deployer's, by
# design (components/catalog/upgrade_manager.py RULES, pinned by tests/test_upgrade_manager.py). `exemptRoles: []`
# makes the pack refuse it.
DEFAULT_EXEMPT_ROLES = ["gcu-upgrade-manager"]

DEFAULT_EXCLUSIVE = [["devicePlugin", "gcusharePlugin"]]
# Components that run before docker's runtime is switched (the toolkit is what switches it).
DEFAULT_RUNTIME_INDEPENDENT = ["nfd", "driver", "toolkit"]

DEFAULT_SECRET_NAME_PATTERN = r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH_?KEY"

# The default node ports of the components that have one: the exporter's metrics (fixed), Nightingale's
# web UI, the GCU-share scheduler extender and gcu-upgrade-manager (gcu-stack:nightingaleWebNodePort,
# gcushareSchedulerNodePort, upgradeManagerNodePort).
DEFAULT_NODE_PORTS = [30940, 30018, 32766, 32765]


def setting(args: Any, key: str, default: Any) -> Any:
    value = (args.get_config() or {}).get(key)
    return default if value is None else value


def _string_list(description: str, default: list) -> dict:
    return {"type": "array", "items": {"type": "string"}, "description": description, "default": default}


def _policy(cls: type, name: str, description: str, level: EnforcementLevel, properties: Optional[dict] = None):
    """Decorator: the function becomes the validation of a `cls` policy with this level and config schema."""

    def make(validate: Callable[[Any, ReportViolation], None]) -> Any:
        return cls(
            name=name,
            description=description,
            validate=validate,
            enforcement_level=level,
            config_schema=PolicyConfigSchema(properties or {}),
        )

    return make


resource_policy = partial(_policy, ResourceValidationPolicy)  # validate(ResourceValidationArgs, report)
stack_policy = partial(_policy, StackValidationPolicy)  # validate(StackValidationArgs, report)


def pod_rule(check: Callable[[ResourceValidationArgs, Pod, ReportViolation], None]):
    """A resource validation that runs `check` on the pod of any workload kind and passes over other objects."""

    @wraps(check)
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        pod = pod_of(args.resource_type, args.props)
        if pod is not None:
            check(args, pod, report)

    return validate


def images(args: ResourceValidationArgs) -> Iterator[tuple[str, str]]:
    """(where, image) for every container of a workload, and the runtime-activation pod image."""
    pod = pod_of(args.resource_type, args.props)
    if pod is not None:
        for label, container in pod.containers():
            image = get(container, "image")
            if isinstance(image, str):
                yield f"{pod.where} {label}", image
    elif args.resource_type in RUNTIME_TYPES:
        image = get(args.props, "podImage")
        if isinstance(image, str):
            yield f"{args.resource_type.rsplit(':', 1)[1]} {args.name} activation pod", image


# 1 ---------------------------------------------------------------------------------------------

@resource_policy(
    "allowed-image-registries",
    "Container images come only from the allowed repositories.",
    MANDATORY,
    {"allowedRepositories": _string_list("Repository prefixes images may come from.", DEFAULT_REPOSITORIES)},
)
def allowed_image_registries(args: ResourceValidationArgs, report: ReportViolation) -> None:
    allowed = [r.rstrip("/") for r in setting(args, "allowedRepositories", DEFAULT_REPOSITORIES)]
    for where, image in images(args):
        if not any(image.startswith(repo + "/") for repo in allowed):
            report(
                f"{where}: image {image!r} is not from an allowed repository ({', '.join(allowed)}). "
                "Set the component's `repository` in the blueprint to one of them, or add its repository "
                "to this policy's `allowedRepositories` config."
            )


# 2 ---------------------------------------------------------------------------------------------

# A digest the runtimes verify: algorithm and its hex length. `name@<digest>` is the opposite of floating.
PINNING_DIGEST = re.compile(r"^(?:sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})$")


def floating_tag(image: str, floating: list[str]) -> Optional[str]:
    """The floating tag an image uses ("latest", or "" for none); None when it is pinned.

    A digest (`repository/image@sha256:<64 hex>`, with or without a tag before it) pins the
    image whatever the tag says; text after '@' that is not a digest pins nothing.
    """
    name, at, digest = image.partition("@")
    if at and PINNING_DIGEST.match(digest):
        return None
    last = name.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else ""
    return tag if tag == "" or tag in floating else None


def _no_floating_tags(args: ResourceValidationArgs, report: ReportViolation) -> None:
    floating = setting(args, "floatingTags", FLOATING_TAGS)
    for where, image in images(args):
        tag = floating_tag(image, floating)
        if tag is not None:
            used = f"tag {tag!r}" if tag else "no tag (docker reads it as 'latest')"
            report(
                f"{where}: image {image!r} has {used}, so nodes may run different builds. "
                "Pin it: set the component's `version` in the blueprint to a release tag or to the image's "
                "digest (`version: sha256:<64 hex>`, giving repository/image@sha256:...)."
            )


_TAG_SETTINGS = {
    "production": {"type": "boolean", "default": False, "description": "This stack is a production stack."},
    "floatingTags": _string_list("Tags that do not pin an image.", FLOATING_TAGS),
}


@resource_policy(
    "no-latest-tag",
    "Images are pinned to a version, not 'latest' or no tag (advice outside production).",
    ADVISORY,
    _TAG_SETTINGS,
)
def no_latest_tag(args: ResourceValidationArgs, report: ReportViolation) -> None:
    # In production `no-latest-tag-production` reports the same images as mandatory.
    if not setting(args, "production", False):
        _no_floating_tags(args, report)


@resource_policy(
    "no-latest-tag-production",
    "Images in a production stack are pinned to a version, not 'latest' or no tag.",
    MANDATORY,
    _TAG_SETTINGS,
)
def no_latest_tag_production(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if setting(args, "production", False):
        _no_floating_tags(args, report)


# 3 ---------------------------------------------------------------------------------------------

@resource_policy(
    "privileged-only-where-needed",
    "Only the driver, the toolkit and the runtime-activation pod run privileged containers.",
    MANDATORY,
    {
        "allowedComponents": _string_list(
            "Values of app.kubernetes.io/component (or app.kubernetes.io/name) that may run privileged.",
            DEFAULT_PRIVILEGED,
        )
    },
)
@pod_rule
def privileged_only_where_needed(args: ResourceValidationArgs, pod: Pod, report: ReportViolation) -> None:
    allowed = setting(args, "allowedComponents", DEFAULT_PRIVILEGED)
    if pod.identity is UNKNOWN or pod.identity in allowed:
        return
    for label in pod.privileged_containers():
        report(
            f"{pod.where} {label} runs privileged, but {pod.who} may not "
            f"(allowed: {', '.join(allowed)}). Remove securityContext.privileged and add only the "
            "capabilities or devices it needs; if it really changes the host, add it to `allowedComponents`."
        )


# 4 ---------------------------------------------------------------------------------------------

@resource_policy(
    "host-paths-allowed",
    "Pods mount only the host paths their component is allowed to.",
    MANDATORY,
    {
        "allowedHostPaths": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "description": "Component -> host paths it may mount (or paths below them); "
            "an entry replaces that component's default list.",
            "default": DEFAULT_HOST_PATHS,
        }
    },
)
@pod_rule
def host_paths_allowed(args: ResourceValidationArgs, pod: Pod, report: ReportViolation) -> None:
    if pod.identity is UNKNOWN:
        return
    # A configured entry replaces that component's default list; the others keep theirs.
    table = {**DEFAULT_HOST_PATHS, **dict(entries(setting(args, "allowedHostPaths", {})))}
    allowed = strings(table.get(pod.identity or ""))
    for path in pod.host_paths():
        if not under(path, allowed):
            report(
                f"{pod.where} mounts host path {path!r}, which {pod.who} may not "
                f"(allowed: {', '.join(allowed) or 'none'}). Mount a path from the list or another volume "
                f"type, or add the path to `allowedHostPaths.{pod.identity or '<component>'}`."
            )


# 5 ---------------------------------------------------------------------------------------------

@resource_policy(
    "resources-set",
    "Every container (init containers included) has CPU and memory requests and limits.",
    MANDATORY,
)
@pod_rule
def resources_set(args: ResourceValidationArgs, pod: Pod, report: ReportViolation) -> None:
    for label, container in pod.containers():
        if label.startswith("ephemeralContainers"):  # the API forbids resources on them
            continue
        missing = [
            f"{section}.{resource}"
            for section in ("requests", "limits")
            for resource in ("cpu", "memory")
            if get(container, "resources", section, resource) is None
        ]
        if missing:
            report(
                f"{pod.where} {label} has no resources.{', resources.'.join(missing)}. "
                "Set CPU and memory requests and limits on it (ContainerDef.resources in components/catalog.py)."
            )


# 7 ---------------------------------------------------------------------------------------------

def _covers(values: list[str], wanted: str) -> bool:
    return wanted in values or "*" in values


def rbac_problems(rule: Any) -> list[str]:
    """What one PolicyRule grants that amounts to privilege escalation."""
    verbs = strings(get(rule, "verbs"))
    groups = strings(get(rule, "apiGroups"))
    resources = strings(get(rule, "resources"))
    problems = [f"verb {verb!r}" for verb in DANGEROUS_VERBS if verb in verbs]
    writes = [verb for verb in WRITE_VERBS if verb in verbs]
    if writes:
        problems += [
            f"{'/'.join(writes)} on {group}/{resource}"
            for group, resource in PROTECTED_RESOURCES
            if _covers(groups, group) and _covers(resources, resource)
        ]
    return problems


@resource_policy(
    "rbac-no-escalation",
    "Roles grant neither escalate/bind/impersonate/* verbs nor write access to RBAC objects or admission webhooks.",
    MANDATORY,
    {"exemptRoles": _string_list("Names of (Cluster)Roles this rule does not check.", DEFAULT_EXEMPT_ROLES)},
)
def rbac_no_escalation(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = kind_of(args.resource_type)
    if kind not in RBAC_KINDS or get(args.props, "metadata", "name") in setting(args, "exemptRoles", DEFAULT_EXEMPT_ROLES):
        return
    for index, rule in enumerate(items(get(args.props, "rules"))):
        problems = rbac_problems(rule)
        if problems:
            report(
                f"{describe(kind, args.props)} rules[{index}] grants {'; '.join(problems)}. "
                "Grant only the verbs and resources the component uses: drop these from the rule."
            )


# 9 ---------------------------------------------------------------------------------------------

@resource_policy(
    "no-literal-secrets",
    "Environment variables named like credentials take their value from a Secret (valueFrom.secretKeyRef).",
    MANDATORY,
    {
        "secretNamePattern": {
            "type": "string",
            "default": DEFAULT_SECRET_NAME_PATTERN,
            "description": "Case-insensitive regular expression for names that hold credentials.",
        },
        "allowedNames": _string_list("Variable names that match the pattern but hold no credential.", []),
    },
)
@pod_rule
def no_literal_secrets(args: ResourceValidationArgs, pod: Pod, report: ReportViolation) -> None:
    pattern = re.compile(setting(args, "secretNamePattern", DEFAULT_SECRET_NAME_PATTERN), re.IGNORECASE)
    allowed = setting(args, "allowedNames", [])
    for label, container in pod.containers():
        for variable in items(get(container, "env")):
            name = get(variable, "name")
            if not isinstance(name, str) or name in allowed or not pattern.search(name):
                continue
            value = get(variable, "value")
            config_map = get(variable, "valueFrom", "configMapKeyRef")
            if (isinstance(value, str) and value) or config_map is not None:
                source = "a literal value" if config_map is None else "a ConfigMap"
                report(
                    f"{pod.where} {label} sets {name} from {source}. Put the value in a Secret and use "
                    f"valueFrom.secretKeyRef instead (or list {name} in `allowedNames` if it is no credential)."
                )


# 10 --------------------------------------------------------------------------------------------

@resource_policy(
    "allowed-node-ports",
    "NodePort services use only the node ports the stack declares.",
    MANDATORY,
    {
        "allowedNodePorts": {
            "type": "array",
            "items": {"type": "integer"},
            "default": DEFAULT_NODE_PORTS,
            "description": "Node ports services may open (add the Nightingale web UI's here when it is deployed).",
        }
    },
)
def allowed_node_ports(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if kind_of(args.resource_type) != "Service":
        return
    service_type = get(args.props, "spec", "type")
    if service_type not in ("NodePort", "LoadBalancer"):
        return
    if service_type == "LoadBalancer" and get(args.props, "spec", "allocateLoadBalancerNodePorts") is False:
        return
    allowed = [p for p in (as_int(v) for v in items(setting(args, "allowedNodePorts", DEFAULT_NODE_PORTS))) if p]
    where = describe("Service", args.props)
    for index, port in enumerate(items(get(args.props, "spec", "ports"))):
        raw = get(port, "nodePort")
        node_port = as_int(raw)
        if raw is None:
            report(
                f"{where} ports[{index}] gets a random node port. Set nodePort to one of "
                f"{allowed}, or make the service ClusterIP."
            )
        elif node_port is not None and node_port not in allowed:
            report(
                f"{where} ports[{index}] opens node port {node_port}, which is not declared (allowed: {allowed}). "
                "Use a declared port, or add it to `allowedNodePorts`."
            )


# 6 (stack) -------------------------------------------------------------------------------------

def pods(resources: list[PolicyResource]) -> Iterator[tuple[PolicyResource, Pod]]:
    for resource in resources:
        pod = pod_of(resource.resource_type, resource.props)
        if pod is not None:
            yield resource, pod


@stack_policy(
    "namespace-pod-security",
    "Namespaces the stack creates carry Pod Security labels: privileged where privileged pods run, else restricted.",
    MANDATORY,
    {
        "exemptNamespaces": _string_list("Namespaces this rule does not check.", DEFAULT_EXEMPT_NAMESPACES),
        "namespaceLevels": {
            "type": "object",
            "additionalProperties": {"type": "string", "enum": ["privileged", "baseline", "restricted"]},
            "default": DEFAULT_NAMESPACE_LEVELS,
            "description": "Namespace -> the level it must have when it runs no privileged pod (default restricted).",
        },
    },
)
def namespace_pod_security(args: StackValidationArgs, report: ReportViolation) -> None:
    exempt = setting(args, "exemptNamespaces", DEFAULT_EXEMPT_NAMESPACES)
    levels = dict(entries(setting(args, "namespaceLevels", DEFAULT_NAMESPACE_LEVELS)))
    host_access: dict[str, list[str]] = {}
    root_or_capabilities: dict[str, list[str]] = {}
    for _, pod in pods(args.resources):
        beyond_restricted = pod.beyond_restricted()
        if pod.host_access():
            host_access.setdefault(pod.namespace, []).append(pod.where)
        elif beyond_restricted:
            root_or_capabilities.setdefault(pod.namespace, []).append(f"{pod.where}: {'; '.join(beyond_restricted)}")
    for resource in args.resources:
        name = get(resource.props, "metadata", "name")
        if kind_of(resource.resource_type) != "Namespace" or not isinstance(name, str) or name in exempt:
            continue
        level = get(resource.props, "metadata", "labels", PSA_ENFORCE)
        if level is UNKNOWN:
            continue
        if name in host_access:
            wanted = "privileged"
            why = f"it runs pods that need host access ({', '.join(host_access[name])})"
        elif name in root_or_capabilities and levels.get(name, "restricted") == "restricted":
            wanted = "baseline"
            why = f"it runs pods the restricted level refuses ({', '.join(root_or_capabilities[name])})"
        else:
            wanted = levels.get(name, "restricted")
            why = "it runs no pod that needs host access"
        if level != wanted:
            found = f"{level!r}" if isinstance(level, str) else "no such label"
            report(
                f"Namespace {name}: label it {PSA_ENFORCE}={wanted} (found {found}), since {why}.",
                resource.urn,
            )


# 8 (stack) -------------------------------------------------------------------------------------

def depends_on(resource: PolicyResource, target: PolicyResource) -> bool:
    """Whether `resource` depends on `target` directly or through other resources' dependencies."""
    seen: set[str] = set()
    stack = list(resource.dependencies)
    while stack:
        current = stack.pop()
        if current.urn == target.urn:
            return True
        if current.urn not in seen:
            seen.add(current.urn)
            stack.extend(current.dependencies)
    return False


@stack_policy(
    "gcu-stack-composition",
    "devicePlugin and gcusharePlugin are never both deployed; GCU DaemonSets wait for the docker runtime activation.",
    MANDATORY,
    {
        "exclusiveComponents": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string"}},
            "default": DEFAULT_EXCLUSIVE,
            "description": "Groups of components of which at most one may be deployed.",
        },
        "runtimeIndependentComponents": _string_list(
            "GCU DaemonSets that need not wait for ContainerRuntime.", DEFAULT_RUNTIME_INDEPENDENT
        ),
    },
)
def gcu_stack_composition(args: StackValidationArgs, report: ReportViolation) -> None:
    ours = [(resource, pod) for resource, pod in pods(args.resources) if pod.ours and isinstance(pod.component, str)]
    deployed: dict[str, PolicyResource] = {}
    for resource, pod in ours:
        deployed.setdefault(pod.component, resource)
    for group in items(setting(args, "exclusiveComponents", DEFAULT_EXCLUSIVE)):
        present = [c for c in strings(group) if c in deployed]
        if len(present) > 1:
            report(
                f"{' and '.join(present)} are deployed together, but at most one of them may be: "
                f"set `notDeploy: true` on all but one in the blueprint.",
                deployed[present[-1]].urn,
            )
    runtime = next((r for r in args.resources if r.resource_type in RUNTIME_TYPES), None)
    if runtime is None:
        return
    independent = setting(args, "runtimeIndependentComponents", DEFAULT_RUNTIME_INDEPENDENT)
    for resource, pod in ours:
        if pod.kind == "DaemonSet" and pod.component not in independent and not depends_on(resource, runtime):
            report(
                f"{pod.where} ({pod.component}) does not wait for {runtime.urn}: make it depend on the "
                "ContainerRuntime resource (directly or through the device plugin), or its pods may start "
                "before the node's container runtime uses the enflame runtime.",
                resource.urn,
            )


ALL_POLICIES = [
    allowed_image_registries,
    no_latest_tag,
    no_latest_tag_production,
    privileged_only_where_needed,
    host_paths_allowed,
    resources_set,
    namespace_pod_security,
    rbac_no_escalation,
    gcu_stack_composition,
    no_literal_secrets,
    allowed_node_ports,
]
