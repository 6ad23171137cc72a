"""What a driver pod installs, as a hash of the parts of its pod template the install depends on.

Two templates with the same key install the same thing: the driver entrypoint finds the version it carries already
loaded and does nothing. Moving a node between them needs a pod restart only: no cordon, no eviction.

Counted: each container's image, command, args, environment, volume mounts and security context, the same of the
init containers, and the pod's volumes and host namespaces. The installer may read any environment variable, so every
environment change counts. Not counted, as they change nothing installed: labels, annotations, resources, probes,
pull policy, tolerations, affinity, node selector, priority and grace periods.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

CONTAINER_FIELDS = ("name", "image", "command", "args", "env", "envFrom", "volumeMounts", "volumeDevices",
                    "securityContext", "workingDir")
POD_FIELDS = ("volumes", "hostPID", "hostIPC", "hostNetwork")
# Values the API server fills in when a template is stored: a manifest and its stored revision must hash alike.
SERVER_DEFAULTS = {"apiVersion": "v1", "defaultMode": 420}


def _normalized(value: Any) -> Any:
    """`value` without empty or false entries and without the API server's defaults (JSON drops the former anyway)."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            item = _normalized(item)
            if item is None or item is False or item in ("", [], {}) or SERVER_DEFAULTS.get(key, object()) == item:
                continue
            kept[key] = item
        return kept
    if isinstance(value, list):
        return [_normalized(item) for item in value]
    return value


def install_key(template: dict) -> str:
    """The hash of what a pod of `template` (a pod template: metadata and spec) installs."""
    spec = template.get("spec") or {}

    def containers(kind: str) -> list:
        return [{f: c.get(f) for f in CONTAINER_FIELDS} for c in spec.get(kind) or []]

    essentials = {
        "containers": containers("containers"),
        "initContainers": containers("initContainers"),
        **{f: spec.get(f) for f in POD_FIELDS},
    }
    canonical = json.dumps(_normalized(essentials), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
