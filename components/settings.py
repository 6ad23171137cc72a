"""Stack configuration: the blueprint (file or inline spec) and the stack's `gcu-stack:*` settings.

The core settings are here; each component or step owns the settings it reads (its
`settings` model, whose aliases are `gcu-stack:` keys). Everything is validated, and
paths made absolute, before the program declares a single resource.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .blueprint import GcuResource, deployed_components
from .errors import BlueprintError, describe
from .images import ImagesOptions
from .links import settings_models
from .model import ResolvedComponent

NAMESPACE = "gcu-stack"
DEFAULT_RESOURCE_NAME = "enflame-gcu-resource"


class Options(BaseModel):
    """The stack's own settings (`gcu-stack:<key>`); components and steps add theirs."""

    model_config = ConfigDict(extra="forbid")

    blueprint: Optional[str] = None
    spec: Optional[dict[str, Any]] = None
    # metadata.name for an inline spec (a blueprint file carries its own).
    name: Optional[str] = None
    kubeconfig: Optional[str] = None
    kube_context: Optional[str] = Field(None, alias="kubeContext")
    # One deliberate move of the stack to another cluster: that cluster's kube-system UID (as the refusal names it).
    adopt_cluster: Optional[str] = Field(
        None, alias="adoptCluster", pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    )
    # Component images to build from images/ (gcu-operator's config.json): components/images.py.
    images: ImagesOptions = Field(default_factory=ImagesOptions, alias="images")
    # Set with `pulumi config set --secret`; the password for images pushed with push: true.
    registry_password: Optional[str] = Field(
        None, alias="registryPassword", repr=False, json_schema_extra={"secret": True}
    )


@dataclass(frozen=True)
class StackSettings:
    resource: GcuResource
    source: str
    options: Options
    project_dir: Path
    # Config keys set with --secret (e.g. gcu-stack:nightingaleDbPassword).
    secret_keys: frozenset[str] = frozenset()
    # Each link's own settings, by link key (components/links.py).
    link_settings: dict[str, BaseModel] = field(default_factory=dict)

    @cached_property
    def _resolved(self) -> tuple[ResolvedComponent, ...]:
        # Once per program run: resolving warns about ignored fields, and each warning is printed once.
        return tuple(deployed_components(self.resource.spec))

    def deployed(self) -> list[ResolvedComponent]:
        return list(self._resolved)

    def plain_text_secrets(self) -> list[str]:
        """Settings marked secret that were not set with --secret: they must never sit in the stack file."""
        problems = []
        for model in (self.options, *self.link_settings.values()):
            for name, info in type(model).model_fields.items():
                key = f"{NAMESPACE}:{info.alias or name}"
                secret = (info.json_schema_extra or {}).get("secret")
                if secret and getattr(model, name) and key not in self.secret_keys and key not in problems:
                    problems.append(key)
        return [f"{key}: is stored in plain text; set it again with `pulumi config set --secret {key} <value>`" for key in problems]


def _aliases(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _config_value(raw: Any) -> Any:
    # Structured config values reach the program as JSON text.
    if isinstance(raw, str) and raw[:1] in ("{", "["):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _validate(model: type[BaseModel], values: dict, project_dir: Path) -> tuple[Optional[BaseModel], list[str]]:
    try:
        return model.model_validate(values, context={"project_dir": str(project_dir)}), []
    except ValidationError as error:
        return None, describe(error, model, f"{NAMESPACE}:")


def _options(config: Mapping[str, Any], project_dir: Path) -> tuple[Options, dict]:
    links = settings_models()
    known = _aliases(Options) + [a for model in links.values() for a in _aliases(model)]
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
    options, problems = _validate(Options, {k: v for k, v in values.items() if k in _aliases(Options)}, project_dir)
    link_settings = {}
    for key, model in links.items():
        found, more = _validate(model, {k: v for k, v in values.items() if k in _aliases(model)}, project_dir)
        problems += more
        link_settings[key] = found
    if problems:
        raise BlueprintError(problems, "stack config")
    return options, link_settings


BLUEPRINT_KEY = f"{NAMESPACE}:blueprint"
BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def _not_text(path: Path, what: str) -> BlueprintError:
    return BlueprintError(
        [f"{BLUEPRINT_KEY}: {path} {what}; a blueprint is a JSON or YAML text file saved as UTF-8 "
         f"(convert it, e.g. `iconv -f GBK -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix}`, "
         f"and point {BLUEPRINT_KEY} at the result)"]
    )


def _decode(path: Path, data: bytes) -> str:
    """The file's text: UTF-8 (a byte-order mark is fine), never a guess at another encoding."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            raise _not_text(path, f"is {encoding} text (it starts with a {encoding} byte-order mark), not UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise _not_text(
            path, f"is not UTF-8 text: byte 0x{data[error.start]:02x} at line {line} column {column} is not UTF-8 "
            "(a file saved as GBK/GB18030 or Latin-1, or a binary file)"
        ) from None
    control = next((c for c in text if (ord(c) < 32 and c not in "\t\n\r") or ord(c) == 127), None)
    if control is not None:
        offset = text.index(control)
        raise _not_text(path, f"holds the control character {control!r} at line {text.count(chr(10), 0, offset) + 1} (a binary file?)")
    return text


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (PyYAML would keep the last one silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the constructor reports it
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (lines {first} and {line}); keep one", key_node.start_mark
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _unique_object(pairs: list[tuple[str, Any]]) -> dict:
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"key {key!r} is given twice in one object")
        found[key] = value
    return found


def read_blueprint_file(path: Path) -> Any:
    """The document in a JSON or YAML blueprint file (UTF-8, no key given twice), or BlueprintError naming the file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BlueprintError([f"{BLUEPRINT_KEY}: file {path} does not exist"]) from None
    except IsADirectoryError:
        raise BlueprintError([f"{BLUEPRINT_KEY}: {path} is a directory; point it at a GcuResource file"]) from None
    except OSError as error:
        raise BlueprintError([f"{BLUEPRINT_KEY}: cannot read {path}: {error.strerror}"]) from None
    text = _decode(path, data)
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text, object_pairs_hook=_unique_object)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except json.JSONDecodeError as error:
        raise BlueprintError([f"line {error.lineno} column {error.colno}: not valid JSON: {error.msg}"], str(path)) from None
    except ValueError as error:  # a key given twice in a JSON object
        raise BlueprintError([f"not valid JSON: {error}"], str(path)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        raise BlueprintError([f"{where}not valid YAML: {getattr(error, 'problem', error)}"], str(path)) from None


def load_settings(config: Mapping[str, Any], project_dir: Path, secret_keys: frozenset[str] = frozenset()) -> StackSettings:
    """Validate `gcu-stack:*` config (keys → raw values) into settings, or raise BlueprintError."""
    options, link_settings = _options({k: v for k, v in config.items() if k.startswith(f"{NAMESPACE}:")}, project_dir)
    if options.blueprint and options.spec is not None:
        raise BlueprintError(
            [f"{BLUEPRINT_KEY} and {NAMESPACE}:spec are both set: keep one "
             f"(`pulumi config rm {NAMESPACE}:spec` to use the file)"]
        )
    if options.blueprint:
        path = Path(options.blueprint).expanduser()
        if not path.is_absolute():
            path = project_dir / path
        document, source = read_blueprint_file(path), str(path)
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
        problems = describe(error, GcuResource)
        if options.blueprint is None:  # an inline spec's metadata.name is gcu-stack:name
            problems = [p.replace("metadata.name:", f"{NAMESPACE}:name (metadata.name):", 1) if p.startswith("metadata.name:") else p for p in problems]
        raise BlueprintError(problems, source) from None
    return StackSettings(
        resource=resource, source=source, options=options, project_dir=project_dir,
        secret_keys=secret_keys, link_settings=link_settings,
    )


def pulumi_config() -> tuple[dict[str, Any], frozenset[str]]:
    """Every config value of this project visible to the running program, and which are secret."""
    from pulumi.runtime import config as runtime_config

    values = dict(runtime_config.get_config_env() or {})
    values.update(runtime_config.CONFIG.get())
    ours = {k: v for k, v in values.items() if k.startswith(f"{NAMESPACE}:")}
    return ours, frozenset(k for k in ours if runtime_config.is_config_secret(k))
