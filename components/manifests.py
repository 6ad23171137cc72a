"""Kubernetes manifests (plain camelCase dicts) for a resolved component.

Pure functions: no Pulumi here, so the same dicts are declared by the program,
validated against the Kubernetes OpenAPI schema in tests and read by policies.
"""

from __future__ import annotations

from typing import Optional

from .catalog import DEPLOY_LABEL_PREFIX, OPERANDS_LABEL, ContainerDef, RbacDef
from .resolve import ResolvedComponent, ResolvedContainer

PART_OF = "gcu-stack"
NODE_CRITICAL = "system-node-critical"
TOLERATIONS = (
    # GCU nodes are often tainted so that only GCU workloads land there.
    {"key": "enflame.com/gcu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
)


def labels(component: ResolvedComponent, instance: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": component.name,
        "app.kubernetes.io/component": component.definition.key,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def selector(component: ResolvedComponent) -> dict[str, str]:
    # Immutable on a workload: keep it to the one label that cannot change without a rename.
    return {"app.kubernetes.io/name": component.name}


def metadata(name: str, namespace: Optional[str], object_labels: dict[str, str]) -> dict:
    meta = {"name": name, "labels": dict(object_labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def config_map_name(component: ResolvedComponent) -> str:
    return f"{component.name}-config"


def service_account_name(component: ResolvedComponent, rbac: RbacDef) -> str:
    return rbac.service_account or component.name


def _security_context(container: ContainerDef) -> dict:
    if container.privileged:
        return {"privileged": True}
    return {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def _container(component: ResolvedComponent, resolved: ResolvedContainer, extra_env: dict[str, str]) -> dict:
    spec = resolved.definition
    env = [{"name": name, "value": value} for name, value in resolved.env]
    env.extend({"name": name, "value": value} for name, value in extra_env.items())
    env.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    mounts = [
        {"name": m.name, "mountPath": m.mount_path, "readOnly": m.read_only} for m in spec.mounts
    ]
    if spec.config_mount:
        mounts.append({"name": "config", "mountPath": spec.config_mount, "readOnly": True})
    body = {
        "name": spec.name,
        "image": resolved.image,
        "imagePullPolicy": resolved.pull_policy,
        "env": env,
        "resources": {
            "requests": {"cpu": spec.resources.cpu_request, "memory": spec.resources.memory_request},
            "limits": {"cpu": spec.resources.cpu_limit, "memory": spec.resources.memory_limit},
        },
        "securityContext": _security_context(spec),
    }
    if spec.command:
        body["command"] = list(spec.command)
    if spec.args:
        body["args"] = list(spec.args)
    if spec.ports:
        body["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in spec.ports]
    if mounts:
        body["volumeMounts"] = mounts
    return body


def _volumes(component: ResolvedComponent) -> list[dict]:
    volumes: dict[str, dict] = {}
    for resolved in component.containers:
        for m in resolved.definition.mounts:
            volumes.setdefault(m.name, {"name": m.name, "hostPath": {"path": m.host_path, "type": m.type}})
        if resolved.definition.config_mount:
            volumes.setdefault("config", {"name": "config", "configMap": {"name": config_map_name(component)}})
    return list(volumes.values())


def _node_affinity(component: ResolvedComponent) -> dict:
    # Operators opt a node out of one component, or of all, by setting the deploy
    # label to "false"; nodes without the label (e.g. ones that just joined) qualify.
    opt_outs = [
        {"key": DEPLOY_LABEL_PREFIX + component.definition.key, "operator": "NotIn", "values": ["false"]},
        {"key": OPERANDS_LABEL, "operator": "NotIn", "values": ["false"]},
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": opt_outs}]}
        }
    }


def pod_template(component: ResolvedComponent, instance: str, extra_env: dict[str, str]) -> dict:
    definition = component.definition
    spec: dict = {
        "priorityClassName": NODE_CRITICAL,
        "tolerations": [dict(t) for t in TOLERATIONS],
        "containers": [_container(component, c, extra_env) for c in component.containers],
    }
    if definition.gcu_nodes_only:
        spec["affinity"] = _node_affinity(component)
    if component.node_selector:
        spec["nodeSelector"] = dict(component.node_selector)
    if definition.rbac is not None:
        spec["serviceAccountName"] = service_account_name(component, definition.rbac)
    else:
        spec["automountServiceAccountToken"] = False
    if definition.host_pid:
        spec["hostPID"] = True
    volumes = _volumes(component)
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": {"labels": labels(component, instance)}, "spec": spec}


def workload(component: ResolvedComponent, instance: str, extra_env: Optional[dict[str, str]] = None) -> dict:
    definition = component.definition
    spec = {
        "selector": {"matchLabels": selector(component)},
        "template": pod_template(component, instance, extra_env or {}),
    }
    if definition.kind == "DaemonSet":
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    else:
        spec["replicas"] = 1
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    return {
        "apiVersion": "apps/v1",
        "kind": definition.kind,
        "metadata": metadata(component.name, component.namespace, labels(component, instance)),
        "spec": spec,
    }


def rbac_objects(component: ResolvedComponent, instance: str) -> list[dict]:
    rbac = component.definition.rbac
    if rbac is None:
        return []
    object_labels = labels(component, instance)
    account = service_account_name(component, rbac)
    role = rbac.cluster_role or component.name
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(account, component.namespace, object_labels),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata(role, None, object_labels),
            "rules": [dict(rule) for rule in rbac.rules],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": metadata(rbac.binding or component.name, None, object_labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": component.namespace}],
        },
    ]


def node_port_service(component: ResolvedComponent, instance: str) -> Optional[dict]:
    port = component.definition.node_port
    if port is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(component.name, component.namespace, labels(component, instance)),
        "spec": {
            "type": "NodePort",
            "selector": selector(component),
            "ports": [
                {
                    "name": port.port_name,
                    "port": port.port,
                    "targetPort": port.port_name,
                    "nodePort": port.node_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def config_map(component: ResolvedComponent, instance: str, files: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(config_map_name(component), component.namespace, labels(component, instance)),
        "data": dict(files),
    }


def namespace(name: str, privileged: bool, instance: str) -> dict:
    # Pod Security Admission: node agents that change the host need "privileged";
    # everything else in our namespaces must pass "restricted".
    level = "privileged" if privileged else "restricted"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/part-of": PART_OF,
                "app.kubernetes.io/instance": instance,
                "app.kubernetes.io/managed-by": "pulumi",
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/audit": level,
                "pod-security.kubernetes.io/warn": level,
            },
        },
    }

