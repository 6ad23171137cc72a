"""The GcuResource spec vocabulary: BaseFields and the value types every component shares.

Field names are the CR's own (camelCase, and the dashed Nightingale sub-part
keys), so a blueprint file written for gcu-operator 2.0 validates unchanged.
Every model forbids unknown fields: a typo is an error, never silently ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)

from .names import is_label_value

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

# The image reference grammar of the kubelet and container runtimes (the distribution
# reference grammar): [host[:port]/]path[:tag][@digest], where every path component is
# lower-case alphanumerics joined by one '.', one '_', two '_' or any number of '-'; the
# host is DNS-like components joined by single dots (upper case allowed), or [IPv6].
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
REGISTRY_HOST = re.compile(rf"^(?:{_HOST_COMPONENT}(?:\.{_HOST_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$")
IMAGE_PATH = re.compile(rf"^{PATH_COMPONENT}(?:/{PATH_COMPONENT})*$")
# Digest algorithms container runtimes verify, and their encoded lengths (lower-case hex).
DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
DIGEST = re.compile(r"^(sha256|sha384|sha512):([a-f0-9]+)$")
# The longest image name (repository and path, without tag or digest) the runtimes accept.
IMAGE_NAME_MAX = 255

PULL_POLICIES = ("Always", "IfNotPresent", "Never")


class _Checked:
    """A string check that also tells JSON Schema (the editor schema) its pattern and length."""

    def __init__(self, check: Callable[[str], None], pattern: Optional[str] = None, max_len: Optional[int] = None):
        self._check = check
        self._json = {k: v for k, v in (("pattern", pattern), ("maxLength", max_len)) if v is not None}

    def _validate(self, value: Any) -> Any:
        if value is not None:
            self._check(value)
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return AfterValidator(self._validate).__get_pydantic_core_schema__(source, handler)

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> Any:
        schema = handler(core_schema)
        schema = handler.resolve_ref_schema(schema)
        schema.update(self._json)
        return schema


def matching(pattern: re.Pattern, what: str, max_len: int) -> _Checked:
    def check(value: str) -> None:
        if len(value) > max_len or not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")

    return _Checked(check, pattern.pattern, max_len)


# ---------------------------------------------------------------------------- image references


def _host_like(component: str) -> bool:
    """Whether the runtimes read the first part of `component/...` as a registry host (docker's rule)."""
    return "." in component or ":" in component or component == "localhost" or component.lower() != component


def _path_problem(path: str, what: str) -> Optional[str]:
    for part in path.split("/"):
        if not re.fullmatch(PATH_COMPONENT, part):
            if part == "":
                return f"{what} has an empty part (a leading, trailing or double '/')"
            return (
                f"{what} part {part!r} is not valid: use lower-case letters and digits, joined by "
                "one '.', one '_', two '_' or '-' (so no '..', '._', '-.' and no upper case)"
            )
    return None


def repository_problem(value: str) -> Optional[str]:
    """Why `value` cannot prefix an image name (`<value>/<image>`), or None."""
    first, _, rest = value.partition("/")
    if _host_like(first):
        if not REGISTRY_HOST.match(first):
            return (
                f"registry host {first!r} is not valid: use DNS names joined by single dots, with an "
                "optional :port (e.g. registry.example.com:5000); no '..', no scheme such as https://"
            )
        return _path_problem(rest, "path") if rest else None
    return _path_problem(value, "path")


def digest_problem(value: str) -> Optional[str]:
    match = DIGEST.match(value)
    if match is None:
        algorithm = value.split(":", 1)[0]
        if algorithm.lower() in DIGEST_LENGTHS and value != value.lower():
            return f"digest {value!r} must be lower-case hex"
        return f"{value!r} is not a digest: use sha256:<64 lower-case hex digits> (or sha384, sha512)"
    algorithm, encoded = match.groups()
    if len(encoded) != DIGEST_LENGTHS[algorithm]:
        return f"a {algorithm} digest has {DIGEST_LENGTHS[algorithm]} hex digits, not {len(encoded)}"
    return None


def is_digest(value: Optional[str]) -> bool:
    return value is not None and DIGEST.match(value) is not None


def _raise_if(problem: Optional[str], value: str, what: str) -> None:
    if problem is not None:
        raise ValueError(f"{value!r} is not {what}: {problem}")


def _check_repository(value: str) -> None:
    if len(value) > IMAGE_NAME_MAX:
        raise ValueError(f"{value[:40]!r}… is not an image repository: longer than {IMAGE_NAME_MAX} characters")
    _raise_if(repository_problem(value), value, "an image repository such as registry.example.com/team")


def _check_image_name(value: str) -> None:
    if len(value) > IMAGE_NAME_MAX:
        raise ValueError(f"{value[:40]!r}… is not an image name: longer than {IMAGE_NAME_MAX} characters")
    if ":" in value.split("@", 1)[0] and "@" not in value:
        raise ValueError(f"{value!r} is not an image name without tag (lower-case, no ':'): set the tag in `version`")
    _raise_if(_path_problem(value, "image name"), value, "an image name without tag (lower-case, no ':' or '@')")


def _check_image(value: str) -> None:
    """BaseFields.image: an image name, optionally pinned to a digest (`name@sha256:...`)."""
    name, at, digest = value.partition("@")
    if ":" in name:
        raise ValueError(f"{value!r} is not an image name without tag (lower-case, no ':'): set the tag in `version`")
    _check_image_name(name)
    if at:
        _raise_if(digest_problem(digest), value, "an image name pinned to a digest (name@sha256:<64 hex digits>)")


def _check_tag(value: str) -> None:
    if not IMAGE_TAG.match(value):
        raise ValueError(f"{value!r} is not an image tag (letters, digits, '_', '.', '-'; at most 128)")


def _check_version(value: str) -> None:
    """BaseFields.version: a tag, or a digest that pins the image (`sha256:<64 hex>`)."""
    if ":" in value:
        _raise_if(digest_problem(value), value, "an image tag or digest")
    elif not IMAGE_TAG.match(value):
        raise ValueError(
            f"{value!r} is not an image tag (letters, digits, '_', '.', '-'; at most 128, not starting "
            "with '.' or '-') or digest (sha256:<64 hex digits>)"
        )


# Loose patterns for editors (JSON Schema); the checks above are exact and say what is wrong.
# A trailing "/" is taken (and dropped when the image reference is made, components/resolve.py).
_REPOSITORY_HINT = r"^[A-Za-z0-9\[][A-Za-z0-9._:\[\]-]*(/[a-z0-9._-]+)*/?$"
_IMAGE_HINT = r"^[a-z0-9][a-z0-9._/-]*(@[a-z0-9]+:[a-f0-9]+)?$"
_VERSION_HINT = r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|sha(256|384|512):[a-f0-9]+)$"


# ---------------------------------------------------------------------------- other values


def _label_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {key!r}: prefix must be a DNS subdomain")
    if len(name) > 63 or not LABEL_NAME.match(name):
        raise ValueError(f"label key {key!r}: name must be 1-63 alphanumerics, '-', '_' or '.'")


def is_label_key(key: str) -> bool:
    try:
        _label_key(key)
    except ValueError:
        return False
    return True


# One requirement of a string label selector (k8s.io/apimachinery labels.Parse): `key`, `!key`, `key=v`, `key==v`,
# `key!=v`, `key>n`, `key<n`, `key in (v,...)`, `key notin (v,...)`. Hand-written: no maintained Python library parses
# Kubernetes selectors, and the API server would only find a malformed one mid-rollout.
_SELECTOR_REQUIREMENT = re.compile(r"""^\s*(?:
    !\s*(?P<absent>[^\s,!=<>()]+)
  | (?P<key>[^\s,!=<>()]+)\s*(?:
        (?P<op>==|=|!=|>|<)\s*(?P<value>[^\s,!=<>()]*)
      | \s(?P<set>in|notin)\s*\((?P<values>[^()]*)\)
    )?
)\s*$""", re.X)


def label_selector_problem(text: str) -> Optional[str]:
    """Why the API server would refuse `text` as a label selector, or None ("" selects everything)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth not in (0, 1):
            return f"unbalanced parentheses at character {i + 1}"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        return "a '(' is not closed"
    parts.append(text[start:])
    if len(parts) == 1 and not parts[0].strip():
        return None
    for part in parts:
        match = _SELECTOR_REQUIREMENT.match(part)
        if not match or not part.strip():
            return f"{part.strip()!r} is not a requirement (key, !key, key=value, key!=value, key in (a,b), key notin (a,b))"
        key = match["absent"] or match["key"]
        if not is_label_key(key):
            return f"{key!r} is not a label key"
        if match["op"] in (">", "<"):
            if not re.fullmatch(r"-?[0-9]+", match["value"]):
                return f"{part.strip()!r}: {match['op']} needs a whole number"
            continue
        # (`in ()` is one empty value, as the API server reads it)
        values = [v.strip() for v in match["values"].split(",")] if match["set"] else [match["value"] or ""]
        bad = [v for v in values if not is_label_value(v)]
        if bad:
            return f"{bad[0]!r} is not a label value"
    return None


def node_selector(value: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
    for key, label_value in (value or {}).items():
        _label_key(key)
        if not is_label_value(label_value):
            raise ValueError(f"label value {label_value!r} for {key!r} is not a valid label value")
    return value


def _env_name(value: str) -> None:
    if len(value) > 1024 or not ENV_NAME.match(value):
        raise ValueError(
            f"{value!r} is not an environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)"
        )
    if value in (".", "..") or value.startswith(".."):
        raise ValueError(f"{value!r} is not an environment variable name: it must not be '.' or start with '..'")


def scalar_to_str(value: Any) -> Any:
    """The CR stores env values and memoryUnit as strings; YAML may hand us numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


# YAML hands numbers and booleans where the CR has strings; JSON Schema says which inputs are fine.
Scalar = BeforeValidator(scalar_to_str, json_schema_input_type=Union[str, int, float, bool])

ObjectName = Annotated[Optional[str], matching(DNS1123_SUBDOMAIN, "a lowercase RFC 1123 name (a-z, 0-9, '-', '.')", 253)]
NamespaceName = Annotated[Optional[str], matching(DNS1123_LABEL, "a lowercase RFC 1123 label (a-z, 0-9, '-'; at most 63)", 63)]
Repository = Annotated[Optional[str], _Checked(_check_repository, _REPOSITORY_HINT, IMAGE_NAME_MAX)]
# An image name without tag or digest (image builds), and BaseFields.image (a digest allowed).
ImageName = Annotated[Optional[str], _Checked(_check_image_name, IMAGE_PATH.pattern, IMAGE_NAME_MAX)]
ImageRef = Annotated[Optional[str], _Checked(_check_image, _IMAGE_HINT)]
# An image tag (image builds), and BaseFields.version (a tag or a digest).
ImageTag = Annotated[Optional[str], _Checked(_check_tag, IMAGE_TAG.pattern, 128)]
Version = Annotated[Optional[str], _Checked(_check_version, _VERSION_HINT)]
NodeSelector = Annotated[Optional[dict[str, str]], AfterValidator(node_selector)]


class Model(BaseModel):
    """Shared settings: unknown keys are errors; values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, validate_assignment=True)


class EnvVar(Model):
    name: Annotated[str, _Checked(_env_name, ENV_NAME.pattern, 1024)]
    value: Annotated[str, Scalar] = ""


class BaseFields(Model):
    """BaseFields of the CR: every component and every sub-part has them."""

    not_deploy: bool = Field(False, alias="notDeploy", description="true: not deployed (an absent component is not deployed either).")
    # An image name; `name@sha256:<hex>` pins it to a digest.
    image: ImageRef = Field(None, description="Image name without tag (default: the component's); `name@sha256:<64 hex>` pins a digest.")
    image_pull_policy: Optional[Literal[PULL_POLICIES]] = Field(None, alias="imagePullPolicy", description="Default IfNotPresent.")
    name: ObjectName = Field(None, description="Name of the component's workload and objects (default: gcu-operator's).")
    namespace: NamespaceName = Field(None, description="Namespace of the component (default: kube-system; Nightingale: enflame).")
    repository: Repository = Field(None, description="Image repository prefix: the image is <repository>/<image>:<version>.")
    # A tag, or a digest (`sha256:<64 hex>`) that pins the image: repository/image@sha256:...
    version: Version = Field(None, description="Image tag (default latest), or a digest sha256:<64 hex> giving <repository>/<image>@sha256:...")
    env: Optional[list[EnvVar]] = Field(None, description="Environment of the component's containers; each name once, none the stack sets itself.")
    node_selector: NodeSelector = Field(None, alias="nodeSelector", description="Nodes to run on (GCU agents default to enflame.com/gcu.present=true).")

    @field_validator("env")
    @classmethod
    def _env_names_once(cls, env: Optional[list[EnvVar]]) -> Optional[list[EnvVar]]:
        # A container's env is a map keyed by name for server-side apply: a repeated name is refused there.
        first: dict[str, int] = {}
        for index, var in enumerate(env or []):
            if var.name in first:
                raise ValueError(
                    f"[{index}].name: {var.name!r} is already set by env[{first[var.name]}]; "
                    "a container takes each name once: keep one of them"
                )
            first[var.name] = index
        return env


class Metadata(BaseModel):
    # Files exported with `kubectl get -o yaml` carry server-set metadata; keep the
    # fields that mean something here and tolerate the rest (uid, resourceVersion, …).
    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, matching(DNS1123_SUBDOMAIN, "a lowercase RFC 1123 name", 253)]
    namespace: NamespaceName = None
    generation: int = 1
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


def deployed(component: Optional[BaseFields]) -> bool:
    """The CR's rule: a component is deployed when its key is present and notDeploy is false."""
    return component is not None and not component.not_deploy


def reference_problem(reference: str) -> Optional[str]:
    """Why the kubelet would refuse this image reference ([host[:port]/]path[:tag][@digest]), or None."""
    name, at, digest = reference.partition("@")
    if at:
        problem = digest_problem(digest)
        if problem:
            return problem
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
        if not IMAGE_TAG.match(tag):
            return f"tag {tag!r} is not valid (letters, digits, '_', '.', '-'; at most 128, not starting with '.' or '-')"
    if len(name) > IMAGE_NAME_MAX:
        return f"its name (without tag or digest) is {len(name)} characters long; the most is {IMAGE_NAME_MAX}"
    first, sep, rest = name.partition("/")
    if sep and _host_like(first):
        if not REGISTRY_HOST.match(first):
            return f"registry host {first!r} is not valid (DNS names joined by single dots, an optional :port)"
        return _path_problem(rest, "path")
    return _path_problem(name, "path")


# ---------------------------------------------------------------------------- node pools

# A pool's name suffixes its workload's (`<name>-<pool>`) and its step's resource.
POOL_NAME_MAX = 40
PoolSelector = Annotated[dict[str, str], AfterValidator(node_selector)]


class Pool(Model):
    """A node pool with its own image: the component's own fields are the default for the fields it leaves unset."""

    name: Annotated[str, matching(DNS1123_LABEL, "a lowercase RFC 1123 label (a-z, 0-9, '-')", POOL_NAME_MAX)] = Field(
        description="The pool's name: its workload is `<name>-<pool>`.")
    node_selector: PoolSelector = Field(
        alias="nodeSelector", min_length=1, description="The nodes of the pool (labels, all of which a node carries).")
    repository: Repository = Field(None, description="Image repository for this pool (default: the component's).")
    image: ImageRef = Field(None, description="Image name for this pool (default: the component's).")
    version: Version = Field(None, description="Image tag or digest for this pool (default: the component's).")


def pools_overlap(first: dict[str, str], second: dict[str, str]) -> bool:
    """Whether one node can carry the labels of both selectors: no key they share asks for different values."""
    return not any(key in second and second[key] != value for key, value in first.items())


class PooledFields(BaseFields):
    """BaseFields, and node pools that run their own image of the component (each its own workload and rollout)."""

    pools: Optional[list[Pool]] = Field(
        None, description="Node pools with their own image (one workload and one rollout each); the component's own "
                          "workload runs on the nodes of no pool. Pools must not overlap. [] keeps the component's "
                          "workload off nodes a removed pool still holds until its rollout moves them back.")

    @field_validator("pools")
    @classmethod
    def _distinct(cls, pools: Optional[list[Pool]]) -> Optional[list[Pool]]:
        seen: dict[str, int] = {}
        for index, pool in enumerate(pools or []):
            if pool.name in seen:
                raise ValueError(f"[{index}].name: {pool.name!r} is already the name of pools[{seen[pool.name]}]")
            seen[pool.name] = index
        for i, first in enumerate(pools or []):
            for j in range(i + 1, len(pools)):
                second = pools[j]
                if pools_overlap(first.node_selector, second.node_selector):
                    both = {**first.node_selector, **second.node_selector}
                    raise ValueError(
                        f"pools[{i}] ({first.name!r}) and pools[{j}] ({second.name!r}) overlap: a node labelled "
                        f"{', '.join(f'{k}={v}' for k, v in sorted(both.items()))} is in both. Give both a label key "
                        "with a different value in each (e.g. pool=a and pool=b)")
        return pools
