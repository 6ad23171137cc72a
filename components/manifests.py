"""Kubernetes manifests (plain camelCase dicts) for a resolved component.

Pure functions: no Pulumi here, so the same dicts are declared by the program,
validated against the Kubernetes OpenAPI schema in tests and read by policies.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any, Optional

from .model import ContainerDef, PodAdditions, RbacDef, ResolvedComponent, ResolvedContainer, ResolvedWorkload
from .names import DEPLOY_LABEL_PREFIX, DRIVER_POOL_LABEL, OPERANDS_LABEL, PART_OF, PAUSED_FOR_DRIVER_UPGRADE, label_value  # noqa: F401 (tests use it from here)

# Where a container that mounts the host's /dev keeps its termination message (the default is in /dev).
TERMINATION_LOG = "/tmp/termination-log"
# On a DaemonSet its step replaces: the pod template's hash (template_hash).
TEMPLATE_HASH_ANNOTATION = "gcu-stack.enflame.com/template-hash"
WAIT_FOR = "pulumi.com/waitFor"
NODE_CRITICAL = "system-node-critical"
TOLERATIONS = (
    # GCU nodes are often tainted so that only GCU workloads land there.
    {"key": "enflame.com/gcu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
)
# Non-root user for containers that run under Pod Security "restricted".
RESTRICTED_UID = 1000


def labels(component: ResolvedComponent, instance: str, name: Optional[str] = None) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": label_value(name or component.name),
        "app.kubernetes.io/component": component.definition.key,
        "app.kubernetes.io/instance": label_value(instance),
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def selector(workload: ResolvedWorkload) -> dict[str, str]:
    # Immutable on a workload: keep it to the one label that cannot change without a rename.
    return {"app.kubernetes.io/name": label_value(workload.name)}


def replaced_delete_first(manifest: dict) -> bool:
    """Whether a replacement of this object must delete the old one before creating the new one.

    Objects holding something only one of them can have: a node port (a NodePort Service), a
    node (a DaemonSet's agent: one device plugin, runtime installer or driver per node), or a
    single copy of its pods (a Deployment: MySQL's volume, the scheduler extender). With a
    rename, the new object would otherwise be created while the old one still holds it.
    """
    kind = manifest.get("kind")
    if kind in ("DaemonSet", "Deployment"):
        return True
    return kind == "Service" and (manifest.get("spec") or {}).get("type") == "NodePort"


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
    context = {"privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if container.restricted:
        context.update(
            {"runAsNonRoot": True, "runAsUser": RESTRICTED_UID, "seccompProfile": {"type": "RuntimeDefault"}}
        )
    return context


def _resources(container: ContainerDef) -> dict:
    r = container.resources
    return {"requests": {"cpu": r.cpu_request, "memory": r.memory_request},
            "limits": {"cpu": r.cpu_limit, "memory": r.memory_limit}}


def _container(resolved: ResolvedContainer, additions: PodAdditions) -> dict:
    spec = resolved.definition
    env = [{"name": name, "value": value} for name, value in resolved.env]
    env.extend({"name": name, "value": value} for name, value in additions.env.items())
    env.extend(
        {"name": name, "valueFrom": {"secretKeyRef": {"name": additions.secret_name, "key": key}}}
        for name, key in spec.secret_env
    )
    env.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    env.extend({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in spec.pod_env)
    mounts = [
        {"name": m.name, "mountPath": m.mount_path, "readOnly": m.read_only} for m in (*spec.mounts, *additions.mounts)
    ]
    if spec.config_mount:
        mounts.append({"name": "config", "mountPath": spec.config_mount, "readOnly": True})
    if spec.secret_mount:
        mounts.append({"name": "secret", "mountPath": spec.secret_mount, "readOnly": True})
    if spec.claim_mount:
        mounts.append({"name": "data", "mountPath": spec.claim_mount})
    mounts.extend({"name": c.name, "mountPath": c.mount_path, "readOnly": False} for c in additions.claims)
    mounts.extend({"name": m.name, "mountPath": m.mount_path, "readOnly": True} for m in additions.secret_mounts)
    if spec.scratch_mount:
        mounts.append({"name": _scratch_volume(spec), "mountPath": spec.scratch_mount})
    body = {
        "name": spec.name,
        "image": resolved.image,
        "imagePullPolicy": resolved.pull_policy,
        "env": env,
        "resources": _resources(spec),
        "securityContext": _security_context(spec),
    }
    if additions.env_from_secrets:
        body["envFrom"] = [{"secretRef": {"name": name}} for name in additions.env_from_secrets]
    if spec.command:
        body["command"] = list(spec.command)
    if spec.args or additions.args:
        body["args"] = [*spec.args, *additions.args]
    if spec.ports:
        body["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in spec.ports]
    readiness = additions.readiness or spec.readiness
    if readiness:
        body["readinessProbe"] = dict(readiness)
    if mounts:
        body["volumeMounts"] = mounts
    if any(m["mountPath"] == "/dev" for m in mounts):
        # The kubelet mounts its termination log at /dev/termination-log by default: on the host's /dev
        # that cannot be created (read-only) or lands on the node itself (read-write).
        body["terminationMessagePath"] = TERMINATION_LOG
    return body


def _volumes(component: ResolvedComponent, workload: ResolvedWorkload, additions: PodAdditions) -> list[dict]:
    volumes: dict[str, dict] = {}
    for resolved in workload.containers:
        spec = resolved.definition
        for m in (*spec.mounts, *additions.mounts):
            volumes.setdefault(m.name, {"name": m.name, "hostPath": {"path": m.host_path, "type": m.type}})
        if spec.config_mount:
            volumes.setdefault("config", {"name": "config", "configMap": {"name": config_map_name(component)}})
        if spec.secret_mount:
            volumes.setdefault("secret", {"name": "secret", "secret": {"secretName": additions.secret_name,
                                                                       "defaultMode": 0o400}})
        if spec.claim_mount:
            volumes.setdefault("data", {"name": "data", "persistentVolumeClaim": {"claimName": additions.claim_name}})
        if spec.scratch_mount:
            volumes.setdefault(_scratch_volume(spec), {"name": _scratch_volume(spec), "emptyDir": {}})
        for c in additions.claims:
            volumes.setdefault(c.name, {"name": c.name, "persistentVolumeClaim": {"claimName": c.claim}})
        for m in additions.secret_mounts:
            volumes.setdefault(m.name, {"name": m.name, "secret": {"secretName": m.secret, "defaultMode": 0o400}})
    return list(volumes.values())


def _node_affinity(component: ResolvedComponent, workload: ResolvedWorkload, additions: PodAdditions) -> Optional[dict]:
    expressions = []
    if component.definition.gcu_nodes_only:
        # Operators opt a node out of one component, or of all, by setting the deploy
        # label to "false"; nodes without the label (e.g. ones that just joined) qualify. An agent
        # holding the GCU device also leaves a node while its driver is replaced, and the driver's own
        # DaemonSet leaves a node the rollout rolled back (a pod of the previous revision runs there).
        held = component.definition.uses_device or component.definition.installs_driver
        excluded = ["false", PAUSED_FOR_DRIVER_UPGRADE] if held else ["false"]
        expressions += [
            {"key": DEPLOY_LABEL_PREFIX + component.definition.key, "operator": "NotIn", "values": excluded},
            {"key": OPERANDS_LABEL, "operator": "NotIn", "values": ["false"]},
        ]
    if workload.other_pools is not None:
        # With pools, the component's own workload leaves a node once a pool's rollout has moved it there.
        expressions.append({"key": DRIVER_POOL_LABEL, "operator": "DoesNotExist"})
    if additions.node_names:
        expressions.append({"key": "kubernetes.io/hostname", "operator": "In", "values": list(additions.node_names)})
    if not expressions:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        }
    }


def _scratch_volume(container: ContainerDef) -> str:
    return f"{container.name}-scratch"


def _claim_owner(resolved: ResolvedContainer) -> dict:
    """An init container that hands a restricted container's claim to its user: the stack's volume is a hostPath,
    whose directory the kubelet creates root-owned and fsGroup never reaches (data an older install left, owned by
    another user, is handed over too). Root with only the capabilities chown needs; Pod Security "baseline"."""
    spec = resolved.definition
    path = shlex.quote(spec.claim_mount or "")
    return {
        "name": f"{spec.name}-claim-owner",
        "image": resolved.image,
        "imagePullPolicy": resolved.pull_policy,
        "command": ["sh", "-c", f'[ "$(stat -c %u:%g {path})" = {RESTRICTED_UID}:{RESTRICTED_UID} ] || '
                                f"chown -R {RESTRICTED_UID}:{RESTRICTED_UID} {path}"],
        "resources": _resources(spec),
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "privileged": False,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]}},
        "volumeMounts": [{"name": "data", "mountPath": spec.claim_mount}],
    }


def owns_its_claim(container: ContainerDef) -> bool:
    """A restricted container with a claim: an init container (root) hands the claim's directory to it."""
    return container.restricted and container.claim_mount is not None


def pod_template(component: ResolvedComponent, workload: ResolvedWorkload, instance: str, additions: PodAdditions) -> dict:
    containers = [_container(c, additions) for c in workload.containers]
    spec: dict = {"containers": containers}
    init = [_claim_owner(c) for c in workload.containers if owns_its_claim(c.definition)]
    if init:
        spec["initContainers"] = init
    if workload.definition.kind == "DaemonSet":  # node agents
        spec["priorityClassName"] = NODE_CRITICAL
        spec["tolerations"] = [dict(t) for t in TOLERATIONS]
    affinity = _node_affinity(component, workload, additions)
    if affinity:
        spec["affinity"] = affinity
    if workload.node_selector:
        spec["nodeSelector"] = dict(workload.node_selector)
    if component.rbac is not None:
        spec["serviceAccountName"] = service_account_name(component, component.rbac)
    else:
        spec["automountServiceAccountToken"] = False
    if workload.definition.host_pid:
        spec["hostPID"] = True
    if any(c.definition.restricted for c in workload.containers):
        spec["securityContext"] = {"fsGroup": RESTRICTED_UID, "seccompProfile": {"type": "RuntimeDefault"}}
    volumes = _volumes(component, workload, additions)
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": {"labels": labels(component, instance, workload.name)}, "spec": spec}


def _digest(template: dict) -> str:
    text = json.dumps(template, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _has_output(value: Any) -> bool:
    import pulumi

    if isinstance(value, pulumi.Output):
        return True
    if isinstance(value, dict):
        return any(_has_output(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_output(v) for v in value)
    return False


def template_hash(template: dict) -> Any:
    """A short, stable digest of a pod template: it changes exactly when the pods would.

    A template running a built image (an Output until the build is done) gets its digest as an Output.
    """
    if _has_output(template):
        import pulumi

        return pulumi.Output.from_input(template).apply(_digest)
    return _digest(template)


def workload_manifest(component: ResolvedComponent, workload: ResolvedWorkload, instance: str, additions: PodAdditions) -> dict:
    kind = workload.definition.kind
    spec = {
        "selector": {"matchLabels": selector(workload)},
        "template": pod_template(component, workload, instance, additions),
    }
    meta = metadata(workload.name, component.namespace, labels(component, instance, workload.name))
    if kind == "DaemonSet" and workload.definition.on_delete:
        # Replaced node by node by the component's step, which compares the template's hash with the live
        # DaemonSet's to plan the rollout. pulumi-kubernetes would wait for a rollout only the step performs:
        # the step is its readiness gate.
        spec["updateStrategy"] = {"type": "OnDelete"}
        meta["annotations"] = {TEMPLATE_HASH_ANNOTATION: template_hash(spec["template"]), WAIT_FOR: "jsonpath={.status.observedGeneration}"}
    elif kind == "DaemonSet":
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    else:
        spec["replicas"] = 1
        # Never below the replica count while rolling: with one replica, maxUnavailable 1 would
        # make the Deployment "Available" with no ready pod, and `pulumi up` return before it serves.
        spec["strategy"] = (
            {"type": "Recreate"}
            if workload.definition.recreate
            else {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
        )
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def service_manifest(component: ResolvedComponent, workload: ResolvedWorkload, instance: str, node_port: Optional[int]) -> dict:
    service = workload.definition.service
    port = {"name": service.port_name, "port": service.port, "targetPort": service.port_name, "protocol": "TCP"}
    spec: dict = {"selector": selector(workload), "ports": [port]}
    if node_port is not None:
        spec["type"] = "NodePort"
        port["nodePort"] = node_port
    else:
        spec["type"] = "ClusterIP"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(workload.name, component.namespace, labels(component, instance, workload.name)),
        "spec": spec,
    }


def rbac_objects(component: ResolvedComponent, instance: str) -> list[dict]:
    rbac = component.rbac
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


def config_map(component: ResolvedComponent, instance: str, files: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(config_map_name(component), component.namespace, labels(component, instance)),
        "data": dict(files),
    }


def namespace(name: str, level: str, instance: str) -> dict:
    """A namespace the stack creates, with the Pod Security Admission level its pods need."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/part-of": PART_OF,
                "app.kubernetes.io/instance": label_value(instance),
                "app.kubernetes.io/managed-by": "pulumi",
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/audit": level,
                "pod-security.kubernetes.io/warn": level,
            },
        },
    }
