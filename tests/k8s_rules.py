"""What a Kubernetes 1.33 API server, the kubelet, Helm and server-side apply require beyond the OpenAPI schema.

A second implementation, written from the Kubernetes documentation ("Object Names and IDs",
"Labels and Selectors", the container image reference grammar, server-side apply's list-map
keys, Helm's release naming), independent of components/plan/rules.py and components/spec.py:
a bug in one shows up as a disagreement with the other in tests/test_properties.py.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

# "Object Names and IDs"
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RFC1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and _SUBDOMAIN.fullmatch(name) is not None


def dns_label(name: str) -> bool:
    return len(name) <= 63 and _RFC1123_LABEL.fullmatch(name) is not None


def dns1035_label(name: str) -> bool:
    return len(name) <= 63 and _RFC1035_LABEL.fullmatch(name) is not None


def path_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name and name != ""


def deployment_name(name: str) -> bool:
    # The Deployment controller names ReplicaSets "<name>-<pod-template-hash>" (hash: up to 10 characters).
    return dns_subdomain(name) and dns_subdomain(name + "-" + "x" * 10)


NAME_CHECKS = {
    "Service": dns1035_label,
    "Namespace": dns_label,
    "Deployment": deployment_name,
    "ClusterRole": path_segment,
    "ClusterRoleBinding": path_segment,
    "Role": path_segment,
    "RoleBinding": path_segment,
}

# "Labels and Selectors"
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not dns_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and _LABEL_NAME.fullmatch(value) is not None)



# Label selectors as the API server parses a `labelSelector` query (apimachinery labels.Parse): requirements
# separated by ',', each `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (v,...)`, `key notin (v,...)`,
# or `key > n` / `key < n` (an integer); blanks around tokens are ignored; values may be empty.
_SELECTOR_TOKEN = re.compile(r"\s*(!=|==|=|!|,|\(|\)|>|<|[^\s!=,()<>]+)")


def label_selector(text: str) -> bool:
    tokens, position = [], 0
    while position < len(text):
        match = _SELECTOR_TOKEN.match(text, position)
        if match is None:
            return text[position:].strip() == ""
        tokens.append(match.group(1))
        position = match.end()
    index = 0

    def take():
        nonlocal index
        index += 1
        return tokens[index - 1] if index <= len(tokens) else None

    def peek():
        return tokens[index] if index < len(tokens) else None

    if not tokens:
        return True
    while True:
        token = take()
        if token == "!":
            key = take()
            if key is None or not label_key(key) or peek() not in (None, ","):
                return False
        elif token is None or token in "!=,()<>" or token in ("==", "!="):
            return False
        else:
            if not label_key(token):
                return False
            operator = peek()
            if operator in ("=", "==", "!="):
                take()
                value = "" if peek() in (None, ",") else take()
                if not label_value(value):
                    return False
            elif operator in ("in", "notin"):
                take()
                if take() != "(":
                    return False
                while True:
                    value = "" if peek() in (",", ")") else take()
                    if value is None or not label_value(value):
                        return False
                    separator = take()
                    if separator == ")":
                        break
                    if separator != ",":
                        return False
            elif operator in (">", "<"):
                take()
                value = take()
                if value is None or not re.fullmatch(r"-?[0-9]+", value):
                    return False
            elif operator not in (None, ","):
                return False
        separator = take()
        if separator is None:
            return True
        if separator != ",":
            return False

# Environment variable names (the portable rule: letters, digits, '_', '-', '.'; not starting with a digit; not '.'/'..')
_ENV = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


def env_name(name: str) -> bool:
    return _ENV.fullmatch(name) is not None and not name.startswith("..") and name != "."


# The image reference grammar (as the kubelet parses it, normalised names):
#   reference := name [":" tag] ["@" digest]; name := [domain "/"] path; name at most 255 characters
_ALNUM = "[a-z0-9]+"
_SEPARATOR = "(?:[._]|__|[-]+)"
_COMPONENT = f"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::{_TAG})?(?:@(?P<digest>{_DIGEST}))?")
_PATH = re.compile(f"{_COMPONENT}(?:/{_COMPONENT})*")
_ENCODED = {"sha256": 64, "sha384": 96, "sha512": 128}


def image_reference(reference: str) -> bool:
    match = _REFERENCE.fullmatch(reference)
    if match is None or len(match.group("name")) > 255:
        return False
    name = match.group("name")
    # Normalisation: the first part is a registry only if it has '.' or ':', is "localhost", or has upper case;
    # otherwise the whole name is a path, every part of which must be a lower-case path component.
    first, slash, rest = name.partition("/")
    is_domain = slash and ("." in first or ":" in first or first == "localhost" or first != first.lower())
    if is_domain:
        if re.fullmatch(_DOMAIN, first) is None or _PATH.fullmatch(rest) is None:
            return False
    elif _PATH.fullmatch(name) is None:
        return False
    digest = match.group("digest")
    if digest:
        algorithm, _, encoded = digest.partition(":")
        if algorithm not in _ENCODED or len(encoded) != _ENCODED[algorithm] or encoded != encoded.lower():
            return False
    return True


def host_path(path: str) -> bool:
    return path.startswith("/") and ".." not in path.split("/")


def maintenance_window(window: dict) -> bool:
    """A driver maintenance window: HH:MM clock times (24:00 only as an end), start and end apart, English day
    abbreviations, and a zone of the IANA database as installed (a TZif file under /usr/share/zoneinfo)."""
    import os

    def clock(text, end: bool) -> bool:
        if not isinstance(text, str) or len(text) != 5 or text[2] != ":" or not (text[:2] + text[3:]).isdigit():
            return False
        hours, minutes = int(text[:2]), int(text[3:])
        return (hours < 24 and minutes < 60) or (end and text == "24:00")

    zone = window.get("timeZone", "UTC")
    zone_file = os.path.join("/usr/share/zoneinfo", zone) if isinstance(zone, str) and zone and ".." not in zone.split("/") \
        and not zone.startswith("/") else ""
    try:
        with open(zone_file, "rb") as file:
            zone_ok = file.read(4) == b"TZif"
    except OSError:
        zone_ok = False
    days = window.get("days", ["Mon"])
    return (clock(window.get("start"), False) and clock(window.get("end"), True) and window.get("start") != window.get("end")
            and zone_ok and bool(days) and all(d in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun") for d in days))


def helm_release_name(name: str) -> bool:
    return len(name) <= 53 and _SUBDOMAIN.fullmatch(name) is not None


def _pod_spec(manifest: dict) -> dict | None:
    if manifest["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
        return manifest["spec"]["template"]["spec"]
    return None


def _labels(manifest: dict) -> Iterator[tuple[str, dict]]:
    yield "metadata.labels", manifest["metadata"].get("labels") or {}
    spec = manifest.get("spec") or {}
    if manifest["kind"] == "Service":
        yield "spec.selector", spec.get("selector") or {}
    elif isinstance(spec.get("selector"), dict):
        yield "spec.selector.matchLabels", spec["selector"].get("matchLabels") or {}
    if _pod_spec(manifest) is not None:
        yield "spec.template.metadata.labels", spec["template"]["metadata"].get("labels") or {}


def violations(manifests: Iterable[dict], releases: Iterable[str] = ()) -> list[str]:
    """Every rule the objects (and Helm release names) break; empty when all of them deploy."""
    found = []
    seen: dict[tuple, str] = {}
    for m in manifests:
        kind, meta = m["kind"], m["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
        what = f"{kind} {namespace}/{name}"
        if not NAME_CHECKS.get(kind, dns_subdomain)(name):
            found.append(f"{what}: invalid name")
        if namespace is not None and not dns_label(namespace):
            found.append(f"{what}: invalid namespace")
        identity = (m["apiVersion"].rpartition("/")[0], kind, namespace or "", name)
        if identity in seen:
            found.append(f"{what}: declared twice")
        seen[identity] = what
        for where, labels in _labels(m):
            for key, value in labels.items():
                if not label_key(key) or not isinstance(value, str) or not label_value(value):
                    found.append(f"{what}: {where} {key}={value!r} is not a valid label")
        if kind == "PersistentVolume" and "hostPath" in m["spec"] and not host_path(m["spec"]["hostPath"]["path"]):
            found.append(f"{what}: hostPath {m['spec']['hostPath']['path']!r}")
        pod = _pod_spec(m)
        if pod is None:
            continue
        for volume in pod.get("volumes") or []:
            if "hostPath" in volume and not host_path(volume["hostPath"]["path"]):
                found.append(f"{what}: volume hostPath {volume['hostPath']['path']!r}")
        terms = (((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
        for term in terms:
            for expression in term.get("matchExpressions") or []:
                if not label_key(expression["key"]) or not all(label_value(v) for v in expression.get("values") or []):
                    found.append(f"{what}: node affinity {expression}")
        for key, value in (pod.get("nodeSelector") or {}).items():
            if not label_key(key) or not label_value(value):
                found.append(f"{what}: nodeSelector {key}={value!r}")
        for container in (*pod.get("initContainers", []), *pod["containers"]):
            if not image_reference(container["image"]):
                found.append(f"{what}: image {container['image']!r}")
            names = [e["name"] for e in container.get("env") or []]
            if len(names) != len(set(names)):
                found.append(f"{what}: container {container['name']} env names repeat: {sorted(n for n in names if names.count(n) > 1)}")
            for env in names:
                if not env_name(env):
                    found.append(f"{what}: env name {env!r}")
    for release in releases:
        if not helm_release_name(release):
            found.append(f"Helm release {release!r}: invalid name")
    return found
