"""Declaring a plain manifest dict as the matching pulumi-kubernetes resource."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

# Typed resources for the kinds the stack declares; anything else is a CustomResource.
_TYPED = {
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "PersistentVolume"): k8s.core.v1.PersistentVolume,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): k8s.apiextensions.v1.CustomResourceDefinition,
    ("node.k8s.io/v1", "RuntimeClass"): k8s.node.v1.RuntimeClass,
}

# Top-level manifest keys whose Python argument name differs.
_ARGUMENT_NAMES = {"roleRef": "role_ref", "stringData": "string_data", "aggregationRule": "aggregation_rule"}


def declare(logical_name: str, manifest: dict, opts: Optional[pulumi.ResourceOptions]) -> pulumi.CustomResource:
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    body = {_ARGUMENT_NAMES.get(k, k): v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    typed = _TYPED.get((api_version, kind))
    if typed is not None:
        return typed(logical_name, opts=opts, **body)
    return k8s.apiextensions.CustomResource(logical_name, api_version=api_version, kind=kind, opts=opts, **body)


def resource_info(manifest: dict) -> dict:
    """The CR status's ResourceInfo: {group, version, kind, name}; core kinds have no group."""
    group, _, version = manifest["apiVersion"].rpartition("/")
    info = {"version": version, "kind": manifest["kind"], "name": manifest["metadata"]["name"]}
    if group:
        info = {"group": group, **info}
    return info
