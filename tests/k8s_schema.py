"""Validating every declared Kubernetes object against the Kubernetes OpenAPI schema."""

from __future__ import annotations

import jsonschema
import kubernetes_validate

# The schema of the oldest Kubernetes gcu-stack supports (components/kube_support.py): what it declares must be valid
# there; the suite's own API servers (the newest, scripts/toolchain/kube.sh) check it against theirs.
KUBERNETES_VERSION = "1.33.0"
# Custom resources of CRDs that other projects install (validated by their own operators).
FOREIGN_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


SECRET_SIG_KEY = "4dabf18193072939515e22adb298388d"


def normalise(value):
    """As the API server would see it: whole floats as integers, Pulumi secret wrappers unwrapped."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        if SECRET_SIG_KEY in value:
            return normalise(value.get("value"))
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    return value


def _crd_schemas(manifests):
    schemas = {}
    for m in manifests:
        if m["kind"] == "CustomResourceDefinition":
            group = m["spec"]["group"]
            for version in m["spec"]["versions"]:
                schemas[(f"{group}/{version['name']}", m["spec"]["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return schemas


def validate_all(run) -> int:
    """Validate every object of a run; returns how many were checked."""
    manifests = [normalise(r.manifest) for r in run.k8s()]
    crds = _crd_schemas(manifests)
    for manifest in manifests:
        key = (manifest["apiVersion"], manifest["kind"])
        if key in crds:
            jsonschema.validate(manifest, crds[key])
        elif key not in FOREIGN_KINDS:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    return len(manifests)
