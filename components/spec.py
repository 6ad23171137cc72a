"""The GcuResource spec as one pydantic model tree.

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
MEMORY_UNITS = ("1", "0.1", "0.01", "0.001")


def _matching(pattern: re.Pattern, what: str, max_len: int):
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


def _scalar_to_str(value: Any) -> Any:
    """The CR stores env values and memoryUnit as strings; YAML may hand us numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


ObjectName = Annotated[Optional[str], _matching(DNS1123_SUBDOMAIN, "a lowercase RFC 1123 name (a-z, 0-9, '-', '.')", 253)]
NamespaceName = Annotated[Optional[str], _matching(DNS1123_LABEL, "a lowercase RFC 1123 label (a-z, 0-9, '-'; at most 63)", 63)]
Repository = Annotated[Optional[str], _matching(REPOSITORY, "an image repository such as registry.example.com/team", 255)]
ImageName = Annotated[Optional[str], _matching(IMAGE_NAME, "an image name without tag (lower-case, no ':' or '@')", 255)]
ImageTag = Annotated[Optional[str], _matching(IMAGE_TAG, "an image tag (letters, digits, '_', '.', '-'; at most 128)", 128)]
NodeSelector = Annotated[Optional[dict[str, str]], AfterValidator(_node_selector)]


class Model(BaseModel):
    """Shared settings: unknown keys are errors; values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, validate_assignment=True)


class EnvVar(Model):
    name: Annotated[str, _matching(ENV_NAME, "an environment variable name", 1024)]
    value: Annotated[str, BeforeValidator(_scalar_to_str)] = ""


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


class NfdSpec(BaseFields):
    master: Optional[BaseFields] = None
    worker: Optional[BaseFields] = None


class GcuSharePluginSpec(BaseFields):
    memory_unit: Annotated[Literal[MEMORY_UNITS], BeforeValidator(_scalar_to_str)] = Field(
        "1", alias="memoryUnit"
    )
    gcushare_nodes: list[Annotated[str, _matching(DNS1123_SUBDOMAIN, "a node name", 253)]] = Field(
        default_factory=list, alias="gcushareNodes"
    )


class HostPathVolume(Model):
    name: ObjectName = None
    hostpath: Optional[str] = None

    @model_validator(mode="after")
    def _absolute(self) -> "HostPathVolume":
        if self.hostpath is not None and not self.hostpath.startswith("/"):
            raise ValueError(f"hostpath {self.hostpath!r} must be an absolute path on the node")
        return self


class ClaimSpec(Model):
    name: ObjectName = None


class NightingaleSpec(BaseFields):
    agentd: Optional[BaseFields] = Field(None, alias="agentd-deploy")
    mysql: Optional[BaseFields] = Field(None, alias="mysql-deploy")
    nserver: Optional[BaseFields] = Field(None, alias="nserver-deploy")
    nwebapi: Optional[BaseFields] = Field(None, alias="nwebapi-deploy")
    prometheus: Optional[BaseFields] = Field(None, alias="prometheus-deploy")
    redis: Optional[BaseFields] = Field(None, alias="redis-deploy")
    mysql_pv: Optional[HostPathVolume] = Field(None, alias="mysql-pv")
    mysql_pvc: Optional[ClaimSpec] = Field(None, alias="mysql-pvc")


class VolcanoSpec(BaseFields):
    controller: Optional[BaseFields] = None
    admission: Optional[BaseFields] = None
    scheduler: Optional[BaseFields] = None


class GcuResourceSpec(Model):
    """`spec` of a GcuResource: one key per component; an absent key is not deployed."""

    nfd: Optional[NfdSpec] = None
    driver: Optional[BaseFields] = None
    toolkit: Optional[BaseFields] = None
    device_plugin: Optional[BaseFields] = Field(None, alias="devicePlugin")
    exporter: Optional[BaseFields] = None
    gfd: Optional[BaseFields] = None
    nightingale: Optional[NightingaleSpec] = None
    gcushare_plugin: Optional[GcuSharePluginSpec] = Field(None, alias="gcusharePlugin")
    gcushare_scheduler: Optional[BaseFields] = Field(None, alias="gcushareScheduler")
    volcano: Optional[VolcanoSpec] = None

    @model_validator(mode="before")
    @classmethod
    def _plugin_alias(cls, data: Any) -> Any:
        # The seed's field table calls the device plugin `plugin`; its blueprint says `devicePlugin`.
        if isinstance(data, dict) and "plugin" in data:
            data = dict(data)
            if data.get("devicePlugin") is not None:
                raise ValueError(
                    "`plugin` and `devicePlugin` name the same component; keep one of them"
                )
            data["devicePlugin"] = data.pop("plugin")
        return data

    @model_validator(mode="after")
    def _exclusive_plugins(self) -> "GcuResourceSpec":
        if deployed(self.device_plugin) and deployed(self.gcushare_plugin):
            raise ValueError(
                "spec.devicePlugin and spec.gcusharePlugin cannot both be deployed: "
                "set spec.devicePlugin.notDeploy: true to use GCU-share, "
                "or spec.gcusharePlugin.notDeploy: true to keep the device plugin"
            )
        return self


class Metadata(BaseModel):
    # Files exported with `kubectl get -o yaml` carry server-set metadata; keep the
    # fields that mean something here and tolerate the rest (uid, resourceVersion, …).
    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, _matching(DNS1123_SUBDOMAIN, "a lowercase RFC 1123 name", 253)]
    namespace: NamespaceName = None
    generation: int = 1
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class GcuResource(Model):
    api_version: Literal["topsops.enflame.com/v1"] = Field(alias="apiVersion")
    kind: Literal["GcuResource"]
    metadata: Metadata
    spec: GcuResourceSpec = Field(default_factory=GcuResourceSpec)
    # A file exported from a cluster carries the old operator's status: read-only, ignored.
    status: Optional[dict[str, Any]] = None


def deployed(component: Optional[BaseFields]) -> bool:
    """The CR's rule: a component is deployed when its key is present and notDeploy is false."""
    return component is not None and not component.not_deploy
