"""Stack configuration: the blueprint (file or inline spec) and the stack's own options.

Everything here is validated before the program declares a single resource.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .catalog import GCUSHARE_EXTENDER_NODE_PORT, NIGHTINGALE_WEB_NODE_PORT
from .errors import BlueprintError, describe
from .images import ImagesOptions
from .spec import GcuResource

NAMESPACE = "gcu-stack"
DEFAULT_RESOURCE_NAME = "enflame-gcu-resource"


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    return value


class GcuNodesOptions(BaseModel):
    """`gcu-stack:gcuNodes`: which nodes are GCU nodes and how a pre-installed driver shows."""

    model_config = ConfigDict(extra="forbid")

    # Explicit node names, or a label selector; neither: nodes NFD labels with PCI vendor 1e36.
    names: list[str] = Field(default_factory=list)
    selector: dict[str, str] = Field(default_factory=dict)
    # key=value label that marks a node whose GCU driver is installed; "" turns the check off.
    driver_label: str = Field("enflame.com/gcu.driver.present=true", alias="driverLabel")
    page_size: int = Field(500, alias="pageSize", ge=1, le=5000)

    @field_validator("driver_label")
    @classmethod
    def _key_value(cls, value: str) -> str:
        if value and "=" not in value:
            raise ValueError(f"{value!r}: expected key=value, e.g. enflame.com/gcu.driver.present=true")
        return value


class DockerRuntimeOptions(BaseModel):
    """`gcu-stack:dockerRuntime`: making `enflame` docker's default runtime on GCU nodes."""

    model_config = ConfigDict(extra="forbid")

    # reload: SIGHUP, running containers untouched (default); restart: gcu-operator's
    # --restart-docker true; none: write only (--restart-docker false).
    mode: Literal["reload", "restart", "none"] = "reload"
    transport: Literal["pod", "local"] = "pod"
    runtime_path: str = Field("/usr/local/enflame/bin/enflame-container-runtime", alias="runtimePath")
    daemon_json: str = Field("/etc/docker/daemon.json", alias="daemonJson")
    docker_host: str = Field("unix:///var/run/docker.sock", alias="dockerHost")
    pid_file: str = Field("/var/run/docker.pid", alias="pidFile")
    restart_command: list[str] = Field(default_factory=lambda: ["systemctl", "restart", "docker"], alias="restartCommand")
    timeout_seconds: int = Field(300, alias="timeoutSeconds", ge=10)
    verify_seconds: float = Field(20.0, alias="verifySeconds", gt=0)

    _paths = field_validator("runtime_path", "daemon_json", "pid_file")(_absolute)

    @field_validator("docker_host")
    @classmethod
    def _unix_socket(cls, value: str) -> str:
        if not value.startswith("unix:///"):
            raise ValueError(f"{value!r}: only unix:///path sockets are supported")
        return value


class VolcanoChartOptions(BaseModel):
    """`gcu-stack:volcanoChart`: where Volcano's official Helm chart comes from."""

    model_config = ConfigDict(extra="forbid")

    chart: str = "volcano"
    repository: str = "https://volcano-sh.github.io/helm-charts"
    version: str = "1.9.0"
    # A chart archive (.tgz) for air-gapped clusters, relative to the project directory; wins over repository.
    path: Optional[str] = None
    timeout_seconds: int = Field(600, alias="timeoutSeconds", ge=30)

    def resolved_path(self, project_dir: Optional[str]) -> str:
        path = Path(self.path).expanduser()
        return str(path if path.is_absolute() or project_dir is None else Path(project_dir) / path)


class Options(BaseModel):
    """Stack settings that are not part of the GcuResource spec (`gcu-stack:<key>`)."""

    model_config = ConfigDict(extra="forbid")

    blueprint: Optional[str] = None
    spec: Optional[dict[str, Any]] = None
    # metadata.name for an inline spec (a blueprint file carries its own).
    name: Optional[str] = None
    kubeconfig: Optional[str] = None
    kube_context: Optional[str] = Field(None, alias="kubeContext")
    exporter_service_monitor: bool = Field(False, alias="exporterServiceMonitor")
    gcu_nodes: GcuNodesOptions = Field(default_factory=GcuNodesOptions, alias="gcuNodes")
    # Set with `pulumi config set --secret`; required when Nightingale is deployed.
    nightingale_db_password: Optional[str] = Field(None, alias="nightingaleDbPassword", repr=False)
    nightingale_web_node_port: int = Field(NIGHTINGALE_WEB_NODE_PORT, alias="nightingaleWebNodePort", ge=30000, le=32767)
    nightingale_storage: str = Field("10Gi", alias="nightingaleStorage", pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
    gcushare_scheduler_node_port: int = Field(GCUSHARE_EXTENDER_NODE_PORT, alias="gcushareSchedulerNodePort", ge=30000, le=32767)
    volcano_chart: VolcanoChartOptions = Field(default_factory=VolcanoChartOptions, alias="volcanoChart")
    docker_runtime: DockerRuntimeOptions = Field(default_factory=DockerRuntimeOptions, alias="dockerRuntime")
    # Component images to build from images/ (gcu-operator's config.json): components/images.py.
    images: ImagesOptions = Field(default_factory=ImagesOptions, alias="images")
    # Set with `pulumi config set --secret`; the password for images pushed with push: true.
    registry_password: Optional[str] = Field(None, alias="registryPassword", repr=False)


@dataclass(frozen=True)
class StackSettings:
    resource: GcuResource
    source: str
    options: Options
    project_dir: Path
    # Config keys set with --secret (e.g. gcu-stack:nightingaleDbPassword).
    secret_keys: frozenset[str] = frozenset()


def _config_value(raw: Any) -> Any:
    # Structured config values reach the program as JSON text.
    if isinstance(raw, str) and raw[:1] in ("{", "["):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _options(config: Mapping[str, Any]) -> Options:
    known = [f.alias or n for n, f in Options.model_fields.items()]
    problems = []
    values = {}
    for full_key, raw in config.items():
        key = full_key.split(":", 1)[1]
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean {NAMESPACE}:{close[0]}?" if close else f"known keys: {', '.join(known)}"
            problems.append(f"{full_key}: unknown setting ({hint})")
            continue
        values[key] = _config_value(raw)
    if problems:
        raise BlueprintError(problems, "stack config")
    try:
        return Options.model_validate(values)
    except ValidationError as error:
        raise BlueprintError(describe(error, Options, f"{NAMESPACE}:"), "stack config") from None


def _parse_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BlueprintError([f"{NAMESPACE}:blueprint: file {path} does not exist"]) from None
    except OSError as error:
        raise BlueprintError([f"{NAMESPACE}:blueprint: cannot read {path}: {error.strerror}"]) from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as error:
        raise BlueprintError([f"line {error.lineno} column {error.colno}: not valid JSON: {error.msg}"], str(path)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        raise BlueprintError([f"{where}not valid YAML: {getattr(error, 'problem', error)}"], str(path)) from None


def load_settings(config: Mapping[str, Any], project_dir: Path, secret_keys: frozenset[str] = frozenset()) -> StackSettings:
    """Validate `gcu-stack:*` config (keys → raw values) into settings, or raise BlueprintError."""
    options = _options({k: v for k, v in config.items() if k.startswith(f"{NAMESPACE}:")})
    if options.blueprint and options.spec is not None:
        raise BlueprintError(
            [f"{NAMESPACE}:blueprint and {NAMESPACE}:spec are both set: keep one "
             f"(`pulumi config rm {NAMESPACE}:spec` to use the file)"]
        )
    if options.blueprint:
        path = Path(options.blueprint).expanduser()
        if not path.is_absolute():
            path = project_dir / path
        document, source = _parse_file(path), str(path)
    elif options.spec is not None:
        document = {
            "apiVersion": "topsops.enflame.com/v1",
            "kind": "GcuResource",
            "metadata": {"name": options.name or DEFAULT_RESOURCE_NAME},
            "spec": options.spec,
        }
        source = f"{NAMESPACE}:spec"
    else:
        raise BlueprintError(
            [f"no blueprint: set {NAMESPACE}:blueprint to a GcuResource file "
             f"(`pulumi config set {NAMESPACE}:blueprint gcu-resource.json`) or {NAMESPACE}:spec to an inline spec"]
        )
    if not isinstance(document, dict):
        raise BlueprintError(["the file must hold one GcuResource object (apiVersion, kind, metadata, spec)"], source)
    try:
        resource = GcuResource.model_validate(document)
    except ValidationError as error:
        raise BlueprintError(describe(error, GcuResource), source) from None
    return StackSettings(resource=resource, source=source, options=options, project_dir=project_dir, secret_keys=secret_keys)


def pulumi_config() -> tuple[dict[str, Any], frozenset[str]]:
    """Every config value of this project visible to the running program, and which are secret."""
    from pulumi.runtime import config as runtime_config

    values = dict(runtime_config.get_config_env() or {})
    values.update(runtime_config.CONFIG.get())
    ours = {k: v for k, v in values.items() if k.startswith(f"{NAMESPACE}:")}
    return ours, frozenset(k for k in ours if runtime_config.is_config_secret(k))
