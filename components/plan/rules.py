"""Every object the stack would declare, built as plain dicts, held to the rules of where its values end up.

`problems(plan)` applies, to every object of the one plan (`objects.py`: the objects the
program declares, each with the blueprint field that named it), the rules a
Kubernetes 1.33 API server, the kubelet, Helm and server-side apply enforce and the
OpenAPI schema cannot express:

- metadata.name per kind (a Service's name is a DNS-1035 label, a Namespace's a DNS-1123
  label, a Deployment's leaves room for its ReplicaSets' `-<hash>`, most others DNS-1123
  subdomains), label keys and values, node-affinity values (label values);
- image references (the distribution grammar the kubelet parses), env (each name once per
  container: server-side apply keys env by name), hostPath paths (no `..`);
- Helm release names (at most 53 characters);
- collisions: two objects of one kind with one namespace and name (cluster-scoped objects
  collide across namespaces), naming both fields.

Every problem names the blueprint field (or `gcu-stack:` setting) the value came from, what
the value is used for, and what to do. Nothing here declares a resource.
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

from ..model import ResolvedComponent
from ..names import is_label_value
from ..settings import NAMESPACE, StackSettings
from ..spec import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    is_digest,
    is_label_key,
    reference_problem,
)
from .objects import Plan, PlannedObject, PlannedRelease, show, strings

SUBDOMAIN = (
    DNS1123_SUBDOMAIN, 253,
    "a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', each dot-separated part "
    "starting and ending with a letter or digit",
)
LABEL = (
    DNS1123_LABEL, 63,
    "a DNS-1123 label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit (no '.')",
)
DNS1035 = (
    DNS1035_LABEL, 63,
    "a DNS-1035 label: at most 63 lower-case letters, digits and '-', starting with a letter and ending with "
    "a letter or digit (no '.')",
)
# A Deployment names its ReplicaSets `<name>-<pod-template-hash>` (up to 10 characters), each a subdomain.
DEPLOYMENT = (
    DNS1123_SUBDOMAIN, 253 - 11,
    "a DNS-1123 subdomain of at most 242 characters (its ReplicaSets are named `<name>-<hash>`, at most 253)",
)
# RBAC objects' names are path segments: anything but '.', '..' and names with '/' or '%'.
PATH_SEGMENT = (
    re.compile(r"^(?!\.{1,2}$)[^/%]+$"), 10**6, "a path segment (not '.' or '..', no '/' or '%')",
)
NAME_RULES: dict[str, tuple[re.Pattern, int, str]] = {
    "Service": DNS1035,
    "Namespace": LABEL,
    "Deployment": DEPLOYMENT,
    "ClusterRole": PATH_SEGMENT,
    "ClusterRoleBinding": PATH_SEGMENT,
    "Role": PATH_SEGMENT,
    "RoleBinding": PATH_SEGMENT,
}
# Helm: a release name is at most 53 characters (it also names the release's Secrets), lower-case DNS-like.
HELM_RELEASE = (DNS1123_SUBDOMAIN, 53, "a Helm release name: at most 53 lower-case letters, digits, '-' and '.'")


# ---------------------------------------------------------------------------- rules


def _suggest(value: str, pattern: re.Pattern, limit: int) -> Optional[str]:
    """A value close to `value` that satisfies the rule, if an easy one exists."""
    text = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")
    if pattern is DNS1035_LABEL:
        text = text.lstrip("0123456789-")
    text = text[:limit].rstrip("-")
    return text if text and pattern.match(text) else None


def _name_problems(obj: PlannedObject) -> list[str]:
    pattern, limit, rule = NAME_RULES.get(obj.kind, SUBDOMAIN)
    name = obj.name
    if len(name) <= limit and pattern.match(name):
        return []
    value = obj.name_value if obj.name_value is not None else name
    derived = value != name  # e.g. `<name>-config`: the field's value plus a fixed part
    if len(name) > limit:
        why, most = f"{len(name)} characters", limit - (len(name) - len(value))
        advice = f"use at most {most} characters" + (f" (the object's name adds {name[len(value):]!r})" if derived else "")
    else:
        why, advice = "not allowed", "choose another name"
        suggestion = _suggest(value, pattern, limit)
        if suggestion and suggestion != value:
            advice += f", e.g. {suggestion!r}"
    return [f"{obj.name_from}: gives {obj.describe()} the name {show(name)!r} ({why}); a {obj.kind} name must be {rule}: {advice}"]


def _label_problems(obj: PlannedObject, labels: Optional[dict], where: str) -> list[str]:
    problems = []
    for key, value in (labels or {}).items():
        if not is_label_key(key):
            problems.append(f"{obj.name_from}: {obj.describe()} would carry the label key {key!r} in {where}, which is not a valid label key")
        if not is_label_value(value):
            problems.append(
                f"{obj.name_from}: {obj.describe()} would carry {key}={value!r} in {where}; a label value is at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            )
    return problems


def _pod(manifest: dict) -> Optional[dict]:
    template = (manifest.get("spec") or {}).get("template")
    return template if manifest.get("kind") in ("DaemonSet", "Deployment") and isinstance(template, dict) else None


def _origin(value: str, sources: list[tuple[str, str]]) -> str:
    """The field a value came from: the one holding exactly it, else one holding it within."""
    for path, held in sources:
        if held == value:
            return path
    for path, held in sources:
        if value and (value in held or held in value) and len(held) > 1:
            return path
    return "the blueprint"


def _all_sources(settings: StackSettings) -> list[tuple[str, str]]:
    sources = list(strings(settings.resource.spec.model_dump(by_alias=True, exclude_unset=True), "spec"))
    sources.append(("metadata.name", settings.resource.metadata.name))
    for model in (settings.options, *settings.link_settings.values()):
        if model is not None:
            for path, held in strings(model.model_dump(by_alias=True), ""):
                sources.append((f"{NAMESPACE}:{path}", held))
    return sources


def _affinity_values(pod_spec: dict) -> Iterator[tuple[str, str]]:
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            for value in expression.get("values") or []:
                yield expression["key"], value


# A host path is a directory or file the kubelet opens (and creates, DirectoryOrCreate) on the node.
PATH_MAX, NAME_MAX = 4095, 255


def _host_path_problem(path: str) -> Optional[str]:
    if ".." in path.split("/"):
        return "contains a '..' component, which the API server refuses"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "contains a control character"
    if not path.startswith("/"):
        return "is not an absolute path"
    if len(path.encode()) > PATH_MAX or any(len(part.encode()) > NAME_MAX for part in path.split("/")):
        return f"is longer than a node's filesystem allows ({PATH_MAX} bytes, {NAME_MAX} per component)"
    return None


def _env_problems(obj: PlannedObject, pod_spec: dict, clashes: dict[tuple, list[str]]) -> list[str]:
    """Each env name once per container: server-side apply keys a container's env by name.

    A name the blueprint sets that gcu-stack sets too is collected in `clashes` (one message per
    blueprint entry, naming every container it reaches); anything else is reported here.
    """
    problems = []
    workload = obj.workload
    resolved = {c.definition.name: c for c in workload.containers} if workload is not None else {}
    for container in pod_spec.get("containers") or []:
        env = container.get("env") or []
        theirs = resolved.get(container["name"])
        user_names = [name for name, _ in theirs.env] if theirs is not None else []
        counts: dict[str, int] = {}
        for entry in env:
            counts[entry["name"]] = counts.get(entry["name"], 0) + 1
        for name, count in counts.items():
            if count < 2:
                continue
            if name in user_names and theirs is not None and theirs.env_from:
                ours = [e for e in env if e["name"] == name][-1]
                what = f"from {ours['valueFrom']}" if "valueFrom" in ours else f"to {ours.get('value')!r}"
                clashes.setdefault((f"{theirs.env_from}[{user_names.index(name)}].name", name, what), []).append(
                    f"{container['name']} in {obj.describe()}"
                )
            else:
                problems.append(f"{obj.name_from}: {obj.describe()} would set env {name!r} twice in container {container['name']}")
    return problems


def _clash_problems(clashes: dict[tuple, list[str]]) -> list[str]:
    return [
        f"{where}: {name!r} is set by gcu-stack itself ({what}) in container {', '.join(containers)}; a container "
        "takes each env name once (server-side apply refuses a repeated key): remove it from the blueprint"
        for (where, name, what), containers in clashes.items()
    ]


def _image_problems(component: ResolvedComponent) -> list[str]:
    problems: list[str] = []
    for container in component.containers:
        repository_from, image_from, version_from = container.image_from
        _, image, version = container.image_parts
        _, _, image_digest = image.partition("@")
        if image_digest and is_digest(version) and image_digest != version:
            problem = (
                f"{image_from} pins the digest {image_digest} and {version_from} pins {version}: one image "
                "cannot have two digests; keep one (drop `@...` from the image, or set the version to a tag)"
            )
        else:
            why = reference_problem(container.image)
            problem = (
                None if why is None else
                f"{repository_from}, {image_from} and {version_from} make the image reference {show(container.image, 120)!r} "
                f"of container {container.definition.name}, which the kubelet refuses: {why}"
            )
        if problem and problem not in problems:
            problems.append(problem)
    return problems


def _collisions(objects: list[PlannedObject]) -> list[str]:
    problems = []
    owners: dict[tuple, PlannedObject] = {}
    for obj in objects:
        group = obj.manifest["apiVersion"].rpartition("/")[0]
        key = (group, obj.kind, obj.namespace or "", obj.name)
        first = owners.setdefault(key, obj)
        if first is obj:
            continue
        both = f"{first.name_from} and {obj.name_from} both name" if first.name_from != obj.name_from else f"{obj.name_from} names twice"
        where = f"{obj.namespace}/{obj.name}" if obj.namespace else f"{obj.name!r} (cluster-wide: namespaces do not separate them)"
        owners_text = " and ".join(
            sorted({f"spec.{o.component.definition.key}" for o in (first, obj) if o.component is not None})
        )
        problems.append(
            f"{both} the {obj.kind} {where} ({owners_text}); two objects cannot share a kind, namespace and "
            "name: give one of them another name"
        )
    return problems


def _release_problems(planned: PlannedRelease) -> list[str]:
    pattern, limit, rule = HELM_RELEASE
    name = planned.release["name"]
    if len(name) <= limit and pattern.match(name):
        return []
    key = planned.component.definition.key
    return [f"{planned.name_from}: {show(name)!r} names the Helm release of spec.{key} ({len(name)} characters); it must be {rule}"]


def problems(found: Plan) -> list[str]:
    """Every rule broken by an object this plan would declare (empty: all of them deploy)."""
    sources = _all_sources(found.settings)
    result: list[str] = []
    clashes: dict[tuple, list[str]] = {}

    def add(items: list[str]) -> None:
        result.extend(p for p in items if p not in result)

    for component in found.deployed:
        add(_image_problems(component))
    for obj in found.objects:
        add(_name_problems(obj))
        add(_label_problems(obj, obj.manifest["metadata"].get("labels"), "metadata.labels"))
        spec = obj.manifest.get("spec") or {}
        add(_label_problems(obj, (spec.get("selector") or {}).get("matchLabels") if obj.kind != "Service" else spec.get("selector"), "its selector"))
        host_path = (spec.get("hostPath") or {}).get("path") if obj.kind == "PersistentVolume" else None
        if host_path is not None and _host_path_problem(host_path):
            add([f"{_origin(host_path, sources)}: {show(host_path)!r} is the hostPath of {obj.describe()} and "
                 f"{_host_path_problem(host_path)}; use a plain absolute path"])
        pod = _pod(obj.manifest)
        if pod is None:
            continue
        pod_spec = pod.get("spec") or {}
        add(_label_problems(obj, (pod.get("metadata") or {}).get("labels"), "its pods' labels"))
        add(_env_problems(obj, pod_spec, clashes))
        for key, value in _affinity_values(pod_spec):
            if not is_label_value(value):
                add([
                    f"{_origin(value, sources)}: {show(value)!r} is matched against the node label {key} of {obj.describe()}, "
                    "and label values are at most 63 letters, digits, '-', '_' or '.': use the node's label value"
                ])
        for volume in pod_spec.get("volumes") or []:
            path = (volume.get("hostPath") or {}).get("path")
            if path is not None and _host_path_problem(path):
                add([f"{_origin(path, sources)}: {show(path)!r} is mounted from the host by {obj.describe()} and "
                     f"{_host_path_problem(path)}; use a plain absolute path"])
    add(_clash_problems(clashes))
    for release in found.releases:
        add(_release_problems(release))
    add(_collisions(found.objects))
    return result
