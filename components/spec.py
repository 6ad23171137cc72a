"""The GcuResource spec vocabulary: BaseFields and the value types every component shares.

Field names are the CR's own (camelCase, and the dashed Nightingale sub-part
keys), so a blueprint file written for gcu-operator 2.0 validates unchanged.
Every model forbids unknown fields: a typo is an error, never silently ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# host[:port]/path/segments, as docker's reference grammar allows (lower-case path).
REPOSITORY = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$"
)
IMAGE_NAME = re.compile(r"^[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$")

PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def matching(pattern: re.Pattern, what: str, max_len: int):
    def check(value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        if len(value) > max_len or not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


def _label_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {key!r}: prefix must be a DNS subdomain")
    if len(name) > 63 or not LABEL_NAME.match(name):
        raise ValueError(f"label key {key!r}: name must be 1-63 alphanumerics, '-', '_' or '.'")


def _node_selector(value: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
    for key, label_value in (value or {}).items():
        _label_key(key)
        if len(label_value) > 63 or not LABEL_VALUE.match(label_value):
            raise ValueError(f"label value {label_value!r} for {key!r} is not a valid label value")
    return value


def scalar_to_str(value: Any) -> Any:
    """The CR stores env values and memoryUnit as strings; YAML may hand us numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


ObjectName = Annotated[Optional[str], matching(DNS1123_SUBDOMAIN, "a lowercase RFC 1123 name (a-z, 0-9, '-', '.')", 253)]
NamespaceName = Annotated[Optional[str], matching(DNS1123_LABEL, "a lowercase RFC 1123 label (a-z, 0-9, '-'; at most 63)", 63)]
Repository = Annotated[Optional[str], matching(REPOSITORY, "an image repository such as registry.example.com/team", 255)]
ImageName = Annotated[Optional[str], matching(IMAGE_NAME, "an image name without tag (lower-case, no ':' or '@')", 255)]
ImageTag = Annotated[Optional[str], matching(IMAGE_TAG, "an image tag (letters, digits, '_', '.', '-'; at most 128)", 128)]
NodeSelector = Annotated[Optional[dict[str, str]], AfterValidator(_node_selector)]


class Model(BaseModel):
    """Shared settings: unknown keys are errors; values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, validate_assignment=True)


class EnvVar(Model):
    name: Annotated[str, matching(ENV_NAME, "an environment variable name", 1024)]
    value: Annotated[str, BeforeValidator(scalar_to_str)] = ""


class BaseFields(Model):
    """BaseFields of the CR: every component and every sub-part has them."""

    not_deploy: bool = Field(False, alias="notDeploy")
    image: ImageName = None
    image_pull_policy: Optional[Literal[PULL_POLICIES]] = Field(None, alias="imagePullPolicy")
    name: ObjectName = None
    namespace: NamespaceName = None
    repository: Repository = None
    version: ImageTag = None
    env: Optional[list[EnvVar]] = None
    node_selector: NodeSelector = Field(None, alias="nodeSelector")


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
