"""Stack configuration: the blueprint (file or inline spec) and the stack's own options.

Everything here is validated before the program declares a single resource.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import BlueprintError, describe
from .spec import GcuResource

NAMESPACE = "gcu-stack"
DEFAULT_RESOURCE_NAME = "enflame-gcu-resource"


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


@dataclass(frozen=True)
class StackSettings:
    resource: GcuResource
    source: str
    options: Options


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
        raise BlueprintError(describe(error, Options, (NAMESPACE,)), "stack config") from None


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


def load_settings(config: Mapping[str, Any], project_dir: Path) -> StackSettings:
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
    return StackSettings(resource=resource, source=source, options=options)


def pulumi_config() -> dict[str, Any]:
    """Every config value of this project visible to the running program."""
    from pulumi.runtime import config as runtime_config

    values = dict(runtime_config.get_config_env() or {})
    values.update(runtime_config.CONFIG.get())
    return {k: v for k, v in values.items() if k.startswith(f"{NAMESPACE}:")}
