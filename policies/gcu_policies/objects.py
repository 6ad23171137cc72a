"""Reading Kubernetes objects as the policy engine hands them over.

Properties arrive as read-only proxies (Mappings and Sequences, not dicts and
lists); during a preview, values computed from other resources are unknown and
raise `UnknownValueError` when read. Every accessor here returns None for a
missing value and `UNKNOWN` for an unknown one, so a rule never crashes and never
reports a value it could not see: `UNKNOWN` is falsy, not None, not a string, not
a Mapping, so "absent" checks (`is None`) and "present" checks (`is True`,
`isinstance(..., str)`) both pass over it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from pulumi_policy.proxy import UnknownValueError

PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
NAME = "app.kubernetes.io/name"
STACK = "gcu-stack"
# The resource that activates the enflame runtime on the nodes (DockerRuntime: its name in earlier releases).
RUNTIME_TYPES = ("pulumi-python:dynamic/gcu:ContainerRuntime", "pulumi-python:dynamic/gcu:DockerRuntime")
CONTAINER_SECTIONS = ("initContainers", "containers", "ephemeralContainers")

# Where each workload kind keeps its pod template ("" for a Pod: the object is the pod).
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "DaemonSet": ("spec", "template"),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


class _Unknown:
    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<unknown during preview>"


UNKNOWN: Any = _Unknown()


def get(obj: Any, *path: Any) -> Any:
    """obj[path[0]][path[1]]…; None where a step is missing, UNKNOWN where one is unknown."""
    for key in path:
        if obj is UNKNOWN:
            return UNKNOWN
        if isinstance(key, int):
            if not is_list(obj) or not -len(obj) <= key < len(obj):
                return None
        elif not isinstance(obj, Mapping):
            return None
        try:
            obj = obj[key]
        except (KeyError, IndexError):
            return None
        except UnknownValueError:
            return UNKNOWN
    return obj


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def items(value: Any) -> Iterator[Any]:
    """The known elements of a list; nothing for a missing, unknown or non-list value."""
    if not is_list(value):
        return
    for index in range(len(value)):
        element = get(value, index)
        if element is not UNKNOWN:
            yield element


def entries(value: Any) -> Iterator[tuple[str, Any]]:
    """The known (key, value) pairs of a mapping."""
    if not isinstance(value, Mapping):
        return
    for key in list(value):
        element = get(value, key)
        if element is not UNKNOWN:
            yield key, element


def strings(value: Any) -> list[str]:
    return [v for v in items(value) if isinstance(v, str)]


def as_int(value: Any) -> Optional[int]:
    """Numbers come over gRPC as floats: 30940.0 is 30940."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return None
    return int(value)


def kind_of(resource_type: str) -> Optional[str]:
    """`kubernetes:apps/v1:DaemonSet` -> DaemonSet; None for anything that is not a Kubernetes object."""
    if not resource_type.startswith("kubernetes:") or resource_type.count(":") != 2:
        return None
    return resource_type.rsplit(":", 1)[1]


def describe(kind: Optional[str], props: Any) -> str:
    """`DaemonSet kube-system/enflame-gcu-exporter`, for messages."""
    name = get(props, "metadata", "name")
    namespace = get(props, "metadata", "namespace")
    shown = name if isinstance(name, str) else "(unnamed)"
    if isinstance(namespace, str):
        shown = f"{namespace}/{shown}"
    return f"{kind or 'object'} {shown}"


def labels_of(obj: Any) -> dict[str, str]:
    return {k: v for k, v in entries(get(obj, "metadata", "labels")) if isinstance(v, str)}


@dataclass(frozen=True)
class Pod:
    """The pod a workload object runs, whatever its kind."""

    kind: str
    where: str  # e.g. "DaemonSet kube-system/enflame-gcu-exporter"
    namespace: str
    labels: dict[str, str]  # the object's known labels, overridden by its pod template's
    # Its app.kubernetes.io/component and app.kubernetes.io/name labels (template first);
    # None when not set, UNKNOWN when not known yet.
    component: Any
    app_name: Any
    spec: Any

    @property
    def identity(self) -> Any:
        """What per-component settings are keyed by: the GCU component, else the app name
        (the activation pod has only `app.kubernetes.io/name: gcu-runtime-activate`)."""
        return self.component if self.component is not None else self.app_name

    @property
    def who(self) -> str:
        if self.component is not None:
            return f"component {self.component!r}"
        if self.app_name is not None:
            return f"app {self.app_name!r} (it has no {COMPONENT} label)"
        return f"a pod without an {COMPONENT} label"

    @property
    def ours(self) -> bool:
        return self.labels.get(PART_OF) == STACK

    def containers(self) -> Iterator[tuple[str, Any]]:
        """(label such as `initContainers gcu-init`, container) for every container of every section."""
        for section in CONTAINER_SECTIONS:
            for index, container in enumerate(items(get(self.spec, section))):
                name = get(container, "name")
                shown = name if isinstance(name, str) else f"#{index}"
                yield f"{section} {shown}", container

    def host_paths(self) -> Iterator[str]:
        for volume in items(get(self.spec, "volumes")):
            path = get(volume, "hostPath", "path")
            if isinstance(path, str):
                yield path

    def privileged_containers(self) -> list[str]:
        return [label for label, c in self.containers() if get(c, "securityContext", "privileged") is True]

    def host_access(self) -> list[str]:
        """What makes Pod Security Admission's baseline level refuse this pod."""
        found = [f"{label} is privileged" for label in self.privileged_containers()]
        found += [f"hostPath {path}" for path in self.host_paths()]
        found += [field for field in ("hostPID", "hostIPC", "hostNetwork") if get(self.spec, field) is True]
        return found

    def beyond_restricted(self) -> list[str]:
        """What this pod asks for that the baseline level allows and the restricted one refuses: a container that
        runs as root (runAsUser 0 or runAsNonRoot false) or adds capabilities other than NET_BIND_SERVICE."""
        found = []
        for label, container in self.containers():
            if get(container, "securityContext", "runAsUser") == 0 or get(container, "securityContext", "runAsNonRoot") is False:
                found.append(f"{label} runs as root")
            added = [c for c in items(get(container, "securityContext", "capabilities", "add")) if c != "NET_BIND_SERVICE"]
            if added:
                found.append(f"{label} adds {', '.join(map(str, added))}")
        return found


def pod_of(resource_type: str, props: Any) -> Optional[Pod]:
    """The pod of a Pod/DaemonSet/Deployment/StatefulSet/ReplicaSet/Job/CronJob; None for other objects."""
    kind = kind_of(resource_type)
    path = POD_TEMPLATE_PATHS.get(kind or "")
    if path is None:
        return None
    template = get(props, *path) if path else props
    namespace = get(props, "metadata", "namespace")
    return Pod(
        kind=kind,
        where=describe(kind, props),
        namespace=namespace if isinstance(namespace, str) else "default",
        labels={**labels_of(props), **labels_of(template)},
        component=_label((template, props), COMPONENT),
        app_name=_label((template, props), NAME),
        spec=get(template, "spec"),
    )


def _label(objects: tuple, key: str) -> Any:
    """The first object's label `key` that is set (or UNKNOWN); None when none is."""
    for obj in objects:
        value = get(obj, "metadata", "labels", key)
        if value is UNKNOWN or isinstance(value, str):
            return value
    return None


def under(path: str, allowed: list[str]) -> bool:
    """Whether a host path is one of `allowed` or inside one (after resolving `..`)."""
    path = posixpath.normpath(path)
    for prefix in allowed:
        prefix = posixpath.normpath(prefix)
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            return True
    return False
