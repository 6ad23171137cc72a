"""The CrossGuard policy pack in policies/: every rule, its config, and the program's own objects.

Rules are driven directly with pulumi_policy's argument objects (properties wrapped in
the same unknown-checking proxies the analyzer uses); enforcement levels, which the
analyzer applies, are checked through the pack's own analyzer servicer.
"""

from __future__ import annotations

import copy
import runpy
import sys
from types import SimpleNamespace

import pytest
from google.protobuf import json_format, struct_pb2
from harness import CONTAINER_RUNTIME, DIGEST, SEED_BLUEPRINT, run_program, seed_spec
from harness import PROJECT_DIR as ROOT
from pulumi.runtime import proto
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import policy as policy_module
from pulumi_policy.proxy import UNKNOWN_ARRAY_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE, unknown_checking_proxy

POLICIES_DIR = ROOT / "policies"
sys.path.insert(0, str(POLICIES_DIR))

from gcu_policies import ALL_POLICIES, PACK_NAME  # noqa: E402

POLICY = {p.name: p for p in ALL_POLICIES}
GCU_REPO = "artifact.enflame.cn/galaxy_docker_hub/gcu"
ENFLAME_REPO = "artifact.enflame.cn/enflame_docker_images/enflame"
PINNED = f"{GCU_REPO}/gcu-plugin:1.4.2"
TYPES = {
    "Pod": "kubernetes:core/v1:Pod",
    "DaemonSet": "kubernetes:apps/v1:DaemonSet",
    "Deployment": "kubernetes:apps/v1:Deployment",
    "StatefulSet": "kubernetes:apps/v1:StatefulSet",
    "Job": "kubernetes:batch/v1:Job",
    "CronJob": "kubernetes:batch/v1:CronJob",
    "Service": "kubernetes:core/v1:Service",
    "Namespace": "kubernetes:core/v1:Namespace",
    "ClusterRole": "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
    "Role": "kubernetes:rbac.authorization.k8s.io/v1:Role",
}
WORKLOAD_KINDS = ("Pod", "DaemonSet", "Deployment", "StatefulSet", "Job", "CronJob")
OPTS = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


# Objects ---------------------------------------------------------------------------------------

def container(name="main", image=PINNED, **fields):
    resources = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}
    return {"name": name, "image": image, "resources": resources, **fields}


def privileged(**fields):
    return container(securityContext={"privileged": True}, **fields)


def host_path(path, name="host"):
    return {"name": name, "hostPath": {"path": path, "type": "Directory"}}


def workload(kind="DaemonSet", component="exporter", containers=None, *, name=None, namespace="kube-system",
             labels=None, **pod_spec):
    """A workload of any kind labelled like the stack's; component=None leaves the component label off."""
    all_labels = {"app.kubernetes.io/name": name or f"enflame-gcu-{component}", "app.kubernetes.io/part-of": "gcu-stack"}
    if component is not None:
        all_labels["app.kubernetes.io/component"] = component
    all_labels.update(labels or {})
    metadata = {"name": all_labels["app.kubernetes.io/name"], "namespace": namespace, "labels": all_labels}
    spec = {"containers": containers or [container()], **pod_spec}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    body = {"template": {"metadata": {"labels": dict(all_labels)}, "spec": spec}}
    if kind == "CronJob":
        body = {"schedule": "0 * * * *", "jobTemplate": {"spec": body}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata, "spec": body}


def activation_pod(**pod_spec):
    return workload("Pod", None, [privileged(name="activate")], name="gcu-runtime-activate", **pod_spec)


def service(*node_ports, type_="NodePort"):
    ports = [{"name": f"p{i}", "port": 9400, **({} if p is None else {"nodePort": p})} for i, p in enumerate(node_ports)]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "kube-system"},
            "spec": {"type": type_, "ports": ports}}


def role(*rules_, kind="ClusterRole", name="gcu-role"):
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "rules": list(rules_)}


def namespace(name, level=None):
    labels = {"app.kubernetes.io/part-of": "gcu-stack"}
    if level is not None:
        labels["pod-security.kubernetes.io/enforce"] = level
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def env(*pairs):
    return [{"name": n, **v} if isinstance(v, dict) else {"name": n, "value": v} for n, v in pairs]


# Driving the rules -----------------------------------------------------------------------------

def urn_of(type_, name):
    return f"urn:pulumi:test::gcu-stack::{type_}::{name}"


def check(policy_name, props, config=None, type_=None, name="object"):
    """The messages a resource policy reports for one object."""
    policy = POLICY[policy_name]
    assert isinstance(policy, ResourceValidationPolicy)
    type_ = type_ or TYPES[props["kind"]]
    found: list[str] = []
    args = ResourceValidationArgs(type_, unknown_checking_proxy(props), urn_of(type_, name), name, OPTS, None, config)
    policy.validate(args, lambda message, urn=None: found.append(message))
    return found


def stack_resource(props, name=None, depends=(), type_=None):
    type_ = type_ or TYPES[props["kind"]]
    name = name or (props.get("metadata") or {}).get("name") or "object"
    return PolicyResource(type_, unknown_checking_proxy(props), urn_of(type_, name), name, OPTS, None, None, list(depends), {})


def check_stack(policy_name, resources, config=None):
    """(message, urn) pairs a stack policy reports."""
    policy = POLICY[policy_name]
    assert isinstance(policy, StackValidationPolicy)
    found: list[tuple[str, str]] = []
    policy.validate(StackValidationArgs(resources, config), lambda message, urn=None: found.append((message, urn)))
    return found


def one(found, *fragments):
    """Exactly one violation, mentioning every fragment (what to change)."""
    assert len(found) == 1, found
    message = found[0] if isinstance(found[0], str) else found[0][0]
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# 1 allowed-image-registries ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_registries_accept_seed_repositories_in_every_workload_kind(kind):
    props = workload(kind, containers=[container(image=f"{ENFLAME_REPO}/gcu-exporter:1.0")],
                     initContainers=[container("init", image=f"{GCU_REPO}/gcu-init:1.0")])
    assert check("allowed-image-registries", props) == []


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_registries_reject_foreign_images_init_containers_included(kind):
    props = workload(kind, initContainers=[container("fetch", image="docker.io/library/busybox:1.36")])
    one(check("allowed-image-registries", props), "initContainers fetch", "docker.io/library/busybox:1.36",
        "`repository`", "`allowedRepositories`")


def test_registries_match_whole_path_segments_and_bare_names():
    for image in (f"{ENFLAME_REPO}-mirror/gcu-exporter:1", "busybox:1.36", ENFLAME_REPO):
        one(check("allowed-image-registries", workload(containers=[container(image=image)])), image)


def test_registries_check_the_docker_runtime_activation_image():
    props = {"podImage": "quay.io/someone/gcu-runtime:1", "nodes": []}
    one(check("allowed-image-registries", props, type_=CONTAINER_RUNTIME, name="container-runtime"), "activation pod")
    assert check("allowed-image-registries", {"podImage": PINNED}, type_=CONTAINER_RUNTIME) == []


def test_registries_config_replaces_the_default_list():
    config = {"allowedRepositories": ["registry.example.com/gcu/"]}
    assert check("allowed-image-registries", workload(containers=[container(image="registry.example.com/gcu/x:1")]), config) == []
    one(check("allowed-image-registries", workload(), config), PINNED, "registry.example.com/gcu")


# 2 no-latest-tag / no-latest-tag-production -----------------------------------------------------

@pytest.mark.parametrize("image", [f"{GCU_REPO}/gcu-plugin:latest", f"{GCU_REPO}/gcu-plugin", "registry:5000/gcu-plugin"])
def test_floating_tags_are_advice_outside_production(image):
    props = workload(containers=[container(image=image)])
    one(check("no-latest-tag", props), image, "`version`")
    assert check("no-latest-tag-production", props) == []


@pytest.mark.parametrize("image", [PINNED, f"{GCU_REPO}/gcu-plugin:latest@sha256:" + "a" * 64, "registry:5000/gcu-plugin:2.0"])
def test_pinned_images_pass(image):
    for name in ("no-latest-tag", "no-latest-tag-production"):
        assert check(name, workload(containers=[container(image=image)]), {"production": True}) == []


def test_floating_tags_are_mandatory_in_production_only_once():
    props = workload(initContainers=[container("init", image=f"{GCU_REPO}/gcu-init:latest")])
    one(check("no-latest-tag-production", props, {"production": True}), "initContainers init", "Pin it")
    assert check("no-latest-tag", props, {"production": True}) == []


def test_floating_tag_list_is_configurable():
    props = workload(containers=[container(image=f"{GCU_REPO}/gcushare-device-plugin:default")])
    assert check("no-latest-tag", props) == []
    one(check("no-latest-tag", props, {"floatingTags": ["latest", "default"]}), "tag 'default'")


# 3 privileged-only-where-needed -----------------------------------------------------------------

@pytest.mark.parametrize("props", [
    workload(component="driver", containers=[privileged()]),
    workload(component="toolkit", containers=[privileged()]),
    activation_pod(),
    workload(component="exporter", containers=[container(securityContext={"privileged": False})]),
])
def test_privileged_allowed_for_host_changing_components(props):
    assert check("privileged-only-where-needed", props) == []


def test_privileged_rejected_elsewhere_init_containers_included():
    props = workload(component="exporter", initContainers=[privileged(name="setup")])
    one(check("privileged-only-where-needed", props), "initContainers setup", "'exporter'",
        "Remove securityContext.privileged", "`allowedComponents`")
    one(check("privileged-only-where-needed", workload(component=None, name="helper", containers=[privileged()])),
        "app 'helper' (it has no app.kubernetes.io/component label)")


def test_privileged_components_are_configurable():
    props = workload(component="exporter", containers=[privileged()])
    assert check("privileged-only-where-needed", props, {"allowedComponents": ["exporter"]}) == []
    one(check("privileged-only-where-needed", workload(component="toolkit", containers=[privileged()]),
              {"allowedComponents": ["driver"]}), "'toolkit'")


# 4 host-paths-allowed ---------------------------------------------------------------------------

def test_host_paths_from_the_catalog_pass():
    props = workload(component="devicePlugin", volumes=[host_path("/var/lib/kubelet/device-plugins"), host_path("/dev/")])
    assert check("host-paths-allowed", props) == []
    assert check("host-paths-allowed", workload(component="exporter", volumes=[host_path("/sys/class/drm")])) == []
    assert check("host-paths-allowed", activation_pod(volumes=[host_path("/etc/docker"), host_path("/var/run")])) == []


@pytest.mark.parametrize("path", ["/etc", "/dev/../etc/shadow", "/devices", "/"])
def test_host_paths_outside_the_component_list_are_rejected(path):
    message = one(check("host-paths-allowed", workload(component="exporter", volumes=[host_path(path)])),
                  f"{path!r}", "'exporter'", "`allowedHostPaths.exporter`")
    assert "/dev, /sys" in message


def test_host_paths_config_replaces_one_component_list():
    config = {"allowedHostPaths": {"exporter": ["/var/lib/gcu"]}}
    assert check("host-paths-allowed", workload(component="exporter", volumes=[host_path("/var/lib/gcu/x")]), config) == []
    one(check("host-paths-allowed", workload(component="exporter", volumes=[host_path("/dev")]), config), "'/dev'")
    # Other components keep their defaults.
    assert check("host-paths-allowed", workload(component="gfd", volumes=[host_path("/dev")]), config) == []


def test_host_paths_of_unknown_components_are_rejected():
    one(check("host-paths-allowed", workload(component="nightingale", volumes=[host_path("/data")])), "allowed: none")


# 5 resources-set ---------------------------------------------------------------------------------

def test_resources_complete_pass():
    assert check("resources-set", workload(initContainers=[container("init")])) == []


def test_resources_missing_are_named():
    init = container("init")
    del init["resources"]["limits"]["cpu"]
    bare = {"name": "bare", "image": PINNED}
    found = check("resources-set", workload(containers=[bare], initContainers=[init]))
    assert len(found) == 2
    assert "initContainers init has no resources.limits.cpu." in found[0]
    assert "requests.cpu, resources.requests.memory, resources.limits.cpu, resources.limits.memory" in found[1]
    assert all("Set CPU and memory requests and limits" in m for m in found)


# 6 namespace-pod-security ------------------------------------------------------------------------

def test_namespace_privileged_where_host_access_runs():
    resources = [
        stack_resource(namespace("gcu", "privileged")),
        stack_resource(workload(namespace="gcu", volumes=[host_path("/dev")])),
        stack_resource(namespace("gcu-web", "restricted")),
        stack_resource(workload("Deployment", "nightingale", namespace="gcu-web")),
    ]
    assert check_stack("namespace-pod-security", resources) == []


@pytest.mark.parametrize("pod_spec", [
    {"volumes": [host_path("/dev")]},
    {"hostPID": True},
    {"containers": [privileged()]},
])
def test_namespace_too_strict_for_its_pods(pod_spec):
    ns = stack_resource(namespace("gcu", "restricted"))
    found = check_stack("namespace-pod-security", [ns, stack_resource(workload(component="driver", namespace="gcu", **pod_spec))])
    one(found, "Namespace gcu", "pod-security.kubernetes.io/enforce=privileged", "found 'restricted'", "DaemonSet gcu/")
    assert found[0][1] == ns.urn


def test_namespace_without_host_access_must_be_restricted():
    for level in ("privileged", None):
        found = check_stack("namespace-pod-security", [stack_resource(namespace("gcu-web", level)),
                                                       stack_resource(workload(namespace="gcu-web"))])
        one(found, "pod-security.kubernetes.io/enforce=restricted")


def test_namespace_baseline_where_a_container_runs_as_root_or_adds_capabilities():
    owner = {**container(name="db-claim-owner"), "securityContext": {
        "runAsUser": 0, "runAsNonRoot": False, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}}
    db = stack_resource(workload("Deployment", "nightingale", namespace="gcu-web", initContainers=[owner]))
    assert check_stack("namespace-pod-security", [stack_resource(namespace("gcu-web", "baseline")), db]) == []
    found = check_stack("namespace-pod-security", [stack_resource(namespace("gcu-web", "restricted")), db])
    one(found, "Namespace gcu-web", "enforce=baseline", "initContainers db-claim-owner runs as root",
        "initContainers db-claim-owner adds CHOWN")
    binds = {**container(), "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}
    web = stack_resource(workload("Deployment", "nightingale", [binds], namespace="gcu-web"))
    assert check_stack("namespace-pod-security", [stack_resource(namespace("gcu-web", "restricted")), web]) == []


def test_namespace_config_exempts_and_sets_levels():
    privileged_pod = stack_resource(workload(component="toolkit", namespace="kube-system", containers=[privileged()]))
    assert check_stack("namespace-pod-security", [stack_resource(namespace("kube-system")), privileged_pod]) == []
    assert check_stack("namespace-pod-security", [stack_resource(namespace("volcano-system", "baseline"))]) == []
    config = {"namespaceLevels": {"gcu-web": "baseline"}, "exemptNamespaces": []}
    assert check_stack("namespace-pod-security", [stack_resource(namespace("gcu-web", "baseline"))], config) == []
    one(check_stack("namespace-pod-security", [stack_resource(namespace("kube-system")), privileged_pod], config),
        "enforce=privileged")


# 7 rbac-no-escalation -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ClusterRole", "Role"])
def test_rbac_least_privilege_passes(kind):
    props = role(
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["get", "list"]},
        kind=kind,
    )
    assert check("rbac-no-escalation", props) == []


@pytest.mark.parametrize("rule, expected", [
    ({"apiGroups": [""], "resources": ["nodes"], "verbs": ["escalate"]}, "verb 'escalate'"),
    ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"]}, "verb 'bind'"),
    ({"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}, "verb 'impersonate'"),
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "verb '*'"),
    ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["create"]},
     "create on rbac.authorization.k8s.io/clusterrolebindings"),
    ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["patch"]}, "patch on admissionregistration.k8s.io/mutatingwebhookconfigurations"),
    ({"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
      "verbs": ["deletecollection"]}, "deletecollection on admissionregistration.k8s.io/validatingwebhookconfigurations"),
])
def test_rbac_escalation_is_rejected(rule, expected):
    message = one(check("rbac-no-escalation", role({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}, rule)),
                  "ClusterRole gcu-role rules[1]", expected, "drop these")
    assert "rules[0]" not in message


def test_rbac_exempt_roles_config():
    props = role({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, name="cluster-admin-ish")
    assert check("rbac-no-escalation", props, {"exemptRoles": ["cluster-admin-ish"]}) == []
    assert len(check("rbac-no-escalation", props)) == 1


# 8 gcu-stack-composition ---------------------------------------------------------------------------

def gcu_chain(*extra_components, wait=True):
    """A DockerRuntime and the DaemonSets of a chain; the device plugin waits for the runtime, the rest for it."""
    runtime = stack_resource({"podImage": PINNED}, "container-runtime", type_=CONTAINER_RUNTIME)
    toolkit = stack_resource(workload(component="toolkit"))
    runtime.dependencies.append(toolkit)
    plugin = stack_resource(workload(component="devicePlugin"), depends=[runtime] if wait else [])
    rest = [stack_resource(workload(component=c), depends=[plugin]) for c in extra_components]
    return [stack_resource(workload(component="nfd")), toolkit, runtime, plugin, *rest]


def test_composition_passes_for_the_seed_chain():
    assert check_stack("gcu-stack-composition", gcu_chain("exporter", "gfd")) == []


def test_composition_rejects_both_device_plugins():
    resources = gcu_chain() + [stack_resource(workload(component="gcusharePlugin"))]
    found = check_stack("gcu-stack-composition", [r for r in resources if r.resource_type != CONTAINER_RUNTIME])
    one(found, "devicePlugin and gcusharePlugin are deployed together", "`notDeploy: true`")
    assert found[0][1] == resources[-1].urn


def test_composition_requires_waiting_for_the_docker_runtime():
    found = check_stack("gcu-stack-composition", gcu_chain("exporter", wait=False))
    assert len(found) == 2
    assert "DaemonSet kube-system/enflame-gcu-devicePlugin (devicePlugin) does not wait" in found[0][0]
    assert "(exporter)" in found[1][0] and "make it depend on the ContainerRuntime resource" in found[1][0]


def test_composition_without_docker_runtime_and_with_config():
    chain = gcu_chain("exporter", wait=False)
    assert check_stack("gcu-stack-composition", [r for r in chain if r.resource_type != CONTAINER_RUNTIME]) == []
    config = {"runtimeIndependentComponents": ["nfd", "driver", "toolkit", "devicePlugin", "exporter"],
              "exclusiveComponents": [["nfd", "toolkit"]]}
    one(check_stack("gcu-stack-composition", chain, config), "nfd and toolkit")


def test_composition_survives_dependency_cycles():
    a = stack_resource(workload(component="exporter"), "a")
    b = stack_resource(workload(component="gfd"), "b", depends=[a])
    a.dependencies.append(b)
    runtime = stack_resource({}, "container-runtime", type_=CONTAINER_RUNTIME)
    assert len(check_stack("gcu-stack-composition", [a, b, runtime])) == 2


# 9 no-literal-secrets --------------------------------------------------------------------------------

def test_secrets_from_secret_refs_pass():
    variables = env(("MYSQL_PASSWORD", {"valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}),
                    ("DOCKER_HOST", "unix:///host/run/docker.sock"), ("API_TOKEN", ""))
    assert check("no-literal-secrets", workload(containers=[container(env=variables)])) == []


@pytest.mark.parametrize("name", ["MYSQL_ROOT_PASSWORD", "db_passwd", "CLIENT_SECRET", "GITHUB_TOKEN", "OPENAI_API_KEY",
                                  "AWS_SECRET_ACCESS_KEY", "registry_credentials"])
def test_secrets_as_literals_are_rejected(name):
    props = workload(initContainers=[container("init", env=env((name, "hunter2")))])
    one(check("no-literal-secrets", props), f"initContainers init sets {name} from a literal value",
        "valueFrom.secretKeyRef")


def test_secrets_from_config_maps_are_rejected():
    variables = env(("DB_PASSWORD", {"valueFrom": {"configMapKeyRef": {"name": "db", "key": "password"}}}))
    one(check("no-literal-secrets", workload(containers=[container(env=variables)])), "from a ConfigMap")


def test_secret_pattern_and_allowed_names_are_configurable():
    props = workload(containers=[container(env=env(("TOKEN_TTL", "60"), ("LICENSE", "abc")))])
    assert len(check("no-literal-secrets", props)) == 1
    assert check("no-literal-secrets", props, {"allowedNames": ["TOKEN_TTL"]}) == []
    assert len(check("no-literal-secrets", props, {"secretNamePattern": "licen[sc]e|token"})) == 2


# 10 allowed-node-ports -------------------------------------------------------------------------------

def test_node_ports_declared_pass():
    assert check("allowed-node-ports", service(30940)) == []
    assert check("allowed-node-ports", service(30940.0)) == []  # numbers arrive over gRPC as floats
    assert check("allowed-node-ports", service(type_="ClusterIP")) == []
    lb = service(None, type_="LoadBalancer")
    lb["spec"]["allocateLoadBalancerNodePorts"] = False
    assert check("allowed-node-ports", lb) == []


def test_node_ports_undeclared_or_random_are_rejected():
    found = check("allowed-node-ports", service(30940, 30019, None))
    assert len(found) == 2
    assert "ports[1] opens node port 30019" in found[0] and "`allowedNodePorts`" in found[0]
    assert "ports[2] gets a random node port. Set nodePort to one of [30940, 30018, 32766, 32765]" in found[1]
    one(check("allowed-node-ports", service(31000, type_="LoadBalancer")), "31000")


def test_node_ports_config():
    assert check("allowed-node-ports", service(30940, 30018), {"allowedNodePorts": [30940, 30018.0]}) == []
    one(check("allowed-node-ports", service(30940), {"allowedNodePorts": [30018]}), "30940")


# Missing and unknown properties ----------------------------------------------------------------------

SAMPLES = [
    workload(component="exporter", containers=[privileged(env=env(("A_TOKEN", "x")), image="busybox")],
             initContainers=[container("init")], volumes=[host_path("/etc")], hostPID=True),
    workload("CronJob", component=None),
    activation_pod(),
    service(30018, None),
    role({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
    namespace("gcu", "restricted"),
    {"podImage": "busybox"},
]


def mutations(value, path=()):
    """(path, mutated copy) for every node: removed, set to None, made unknown."""
    if isinstance(value, dict):
        children = list(value.items())
    elif isinstance(value, list):
        children = list(enumerate(value))
    else:
        return
    for key, child in children:
        for replacement in ("remove", None, UNKNOWN_STRING_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_ARRAY_VALUE):
            mutated = copy.deepcopy(value)
            if replacement == "remove":
                del mutated[key]
            else:
                mutated[key] = replacement
            yield path + (key,), mutated
        for sub_path, sub in mutations(child, path + (key,)):
            mutated = copy.deepcopy(value)
            mutated[key] = sub
            yield sub_path, mutated


def type_of(props):
    return TYPES.get(props.get("kind"), CONTAINER_RUNTIME)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.get("kind", "DockerRuntime"))
def test_no_rule_crashes_on_missing_null_or_unknown_properties(sample):
    for path, props in [((), {}), *mutations(sample)]:
        for policy in ALL_POLICIES:
            try:
                if isinstance(policy, ResourceValidationPolicy):
                    check(policy.name, props, type_=type_of(sample))
                else:
                    check_stack(policy.name, [stack_resource(props, "x", type_=type_of(sample)),
                                              stack_resource(namespace("kube-system"))])
            except Exception as error:  # pragma: no cover - the failure report
                pytest.fail(f"{policy.name} crashed on {path} of {sample.get('kind')}: {error!r}")


def test_unknown_values_are_not_reported():
    unknown_image = workload(containers=[container(image=UNKNOWN_STRING_VALUE)])
    assert check("allowed-image-registries", unknown_image) == check("no-latest-tag", unknown_image) == []
    unknown_resources = workload(containers=[container(resources=UNKNOWN_OBJECT_VALUE)])
    assert check("resources-set", unknown_resources) == []
    unknown_component = workload(component=UNKNOWN_STRING_VALUE, containers=[privileged()], volumes=[host_path("/etc")])
    assert check("privileged-only-where-needed", unknown_component) == check("host-paths-allowed", unknown_component) == []
    assert check("allowed-node-ports", service(UNKNOWN_STRING_VALUE)) == []
    unknown_level = namespace("gcu", UNKNOWN_STRING_VALUE)
    assert check_stack("namespace-pod-security", [stack_resource(unknown_level)]) == []


# The pack ---------------------------------------------------------------------------------------------

class FakeServer:
    def add_insecure_port(self, address):
        return 0

    def start(self):
        pass

    def stop(self, grace):
        pass


def stop_serving(seconds):
    raise KeyboardInterrupt  # what PolicyPack's serve loop stops on


@pytest.fixture(scope="module")
def analyzer():
    """The analyzer servicer policies/__main__.py builds, without a gRPC server."""
    captured = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(policy_module, "grpc", SimpleNamespace(server=lambda *args, **kwargs: FakeServer()))
        patch.setattr(policy_module, "time", SimpleNamespace(sleep=stop_serving))
        patch.setattr(policy_module.analyzer_pb2_grpc, "add_AnalyzerServicer_to_server",
                      lambda servicer, server: captured.setdefault("servicer", servicer))
        runpy.run_path(str(POLICIES_DIR), run_name="__main__")
    return captured["servicer"]


DEFAULT_LEVELS = {
    "allowed-image-registries": "MANDATORY",
    "no-latest-tag": "ADVISORY",
    "no-latest-tag-production": "MANDATORY",
    "privileged-only-where-needed": "MANDATORY",
    "host-paths-allowed": "MANDATORY",
    "resources-set": "MANDATORY",
    "namespace-pod-security": "MANDATORY",
    "rbac-no-escalation": "MANDATORY",
    "gcu-stack-composition": "MANDATORY",
    "no-literal-secrets": "MANDATORY",
    "allowed-node-ports": "MANDATORY",
}


def test_pack_assembles_every_rule_with_its_level_and_config_schema(analyzer):
    info = analyzer.GetAnalyzerInfo(None, None)
    assert info.name == PACK_NAME
    levels = {p.name: proto.EnforcementLevel.Name(p.enforcementLevel) for p in info.policies}
    assert levels == DEFAULT_LEVELS
    schemas = {p.name: set(p.configSchema.properties) for p in info.policies}
    assert schemas["allowed-image-registries"] == {"allowedRepositories"}
    assert schemas["allowed-node-ports"] == {"allowedNodePorts"}
    assert "production" in schemas["no-latest-tag-production"]
    assert (POLICIES_DIR / "PulumiPolicy.yaml").is_file()
    assert "pulumi-policy==1.21.0" in (POLICIES_DIR / "requirements.txt").read_text()


def analyze(analyzer, props, config):
    """Configure the pack as `--policy-pack-config` would, analyze one object: {policy: level}."""
    policy_config = {}
    for name, value in config.items():
        level = proto.EnforcementLevel.Value(value.pop("enforcementLevel", DEFAULT_LEVELS[name]).upper())
        policy_config[name] = proto.PolicyConfig(enforcementLevel=level, properties=json_format.ParseDict(value, struct_pb2.Struct()))
    analyzer.Configure(proto.ConfigureAnalyzerRequest(policyConfig=policy_config), None)
    type_ = TYPES[props["kind"]]
    request = proto.AnalyzeRequest(type=type_, urn=urn_of(type_, "x"), name="x",
                                   properties=json_format.ParseDict(props, struct_pb2.Struct()))
    response = analyzer.Analyze(request, None)
    return {d.policyName: proto.EnforcementLevel.Name(d.enforcementLevel) for d in response.diagnostics}


def test_enforcement_levels_follow_config(analyzer):
    props = workload(containers=[{"name": "c", "image": f"{GCU_REPO}/gcu-plugin:latest"}])
    assert analyze(analyzer, props, {}) == {"resources-set": "MANDATORY", "no-latest-tag": "ADVISORY"}
    overridden = {"resources-set": {"enforcementLevel": "advisory"}, "no-latest-tag": {"enforcementLevel": "disabled"}}
    assert analyze(analyzer, props, overridden) == {"resources-set": "ADVISORY"}
    production = {"no-latest-tag": {"production": True}, "no-latest-tag-production": {"production": True}}
    assert analyze(analyzer, props, production) == {"resources-set": "MANDATORY", "no-latest-tag-production": "MANDATORY"}


# The program's own objects ----------------------------------------------------------------------------

def policy_resources(run):
    """Every registration as the analyzer's stack view: properties proxied, parents and dependencies linked."""
    by_urn = {r.urn: stack_resource(r.inputs, r.name, type_=r.type) for r in run.registrations}
    for registration in run.registrations:
        resource = by_urn[registration.urn]
        resource.parent = by_urn.get(registration.parent)
        resource.dependencies.extend(by_urn[d] for d in registration.dependencies if d in by_urn)
    return list(by_urn.values())


def violations(resources) -> dict[str, list[str]]:
    """Every policy's messages over the program's resources, by policy name (default pack config)."""
    found: dict[str, list[str]] = {}
    for policy in ALL_POLICIES:
        report = lambda message, urn=None, name=policy.name: found.setdefault(name, []).append(message)  # noqa: E731
        if isinstance(policy, StackValidationPolicy):
            policy.validate(StackValidationArgs(resources), report)
            continue
        for r in resources:
            policy.validate(ResourceValidationArgs(r.resource_type, r.props, r.urn, r.name, OPTS, None), report)
    return found


@pytest.mark.parametrize("config", [
    {"blueprint": str(SEED_BLUEPRINT)},
    # The seed with the driver on and the exporter in a namespace of its own.
    {"spec": seed_spec(**{"driver.notDeploy": False, "exporter.namespace": "gcu-monitoring"})},
], ids=["seed", "seed-driver-own-namespace"])
def test_program_objects_have_no_mandatory_violation(config):
    resources = policy_resources(run_program(config))
    assert any(r.resource_type == CONTAINER_RUNTIME for r in resources)
    found = violations(resources)
    mandatory = {name: messages for name, messages in found.items() if POLICY[name].enforcement_level != EnforcementLevel.ADVISORY}
    assert mandatory == {}
    # The seed pins only NFD; every other image floats on `latest`, which is advice outside production.
    assert set(found) == {"no-latest-tag"} and all(":latest" in m for m in found["no-latest-tag"])


@pytest.mark.parametrize("plugin", ["devicePlugin", "gcusharePlugin"])
def test_every_component_with_the_catalog_defaults_passes_the_pack_as_it_ships(plugin):
    """The pack keeps its own allow-lists (a second opinion), but what the catalog declares by default passes them."""
    from components.catalog import COMPONENTS

    other = {"devicePlugin": "gcusharePlugin", "gcusharePlugin": "devicePlugin"}[plugin]
    spec = {c.key: {} for c in COMPONENTS if c.key != other}
    spec["upgradeManager"] = {"nodeSelector": {"kubernetes.io/hostname": "node-1"}}   # the one field it requires
    resources = policy_resources(
        run_program({"spec": spec, "nightingaleDbPassword": "pw"}, secret_keys=("nightingaleDbPassword",))
    )
    found = violations(resources)
    mandatory = {name: messages for name, messages in found.items() if POLICY[name].enforcement_level != EnforcementLevel.ADVISORY}
    assert mandatory == {}


# Digests: the opposite of floating -------------------------------------------------------------

def test_a_blueprint_pinned_by_digest_passes_the_tag_rules_in_production():
    run = run_program({"spec": seed_spec(**{"exporter.version": DIGEST, "devicePlugin.image": f"gcu-plugin@{DIGEST}"})})
    pinned = [r for r in run.k8s() if r.k8s_name in ("enflame-gcu-exporter", "enflame-gcu-k8s-plugin") and r.inputs["kind"] == "DaemonSet"]
    assert [c["image"] for r in pinned for c in r.inputs["spec"]["template"]["spec"]["containers"]] == [
        f"{GCU_REPO}/gcu-plugin:latest@{DIGEST}", f"{ENFLAME_REPO}/gcu-exporter@{DIGEST}",
    ]
    for registration in pinned:
        assert check("no-latest-tag-production", registration.inputs, {"production": True}) == []
        assert check("allowed-image-registries", registration.inputs) == []


@pytest.mark.parametrize("image", [f"{GCU_REPO}/gcu-plugin@sha256:abc", f"{GCU_REPO}/gcu-plugin:latest@latest", f"{GCU_REPO}/gcu-plugin@md5:" + "a" * 32])
def test_text_after_at_that_is_no_digest_pins_nothing(image):
    one(check("no-latest-tag-production", workload(containers=[container(image=image)]), {"production": True}), "Pin it", "sha256:<64 hex>")
