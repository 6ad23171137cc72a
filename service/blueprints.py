"""The blueprints directory (the only place PUT and preview read) and a blueprint checked against its stack.

A blueprint named in a request is a file in that directory (gum's `/topsdata/dcp/gcu-upgrade-manager/blueprints/`),
JSON or YAML. It is checked exactly as `pulumi preview` would check it, with the stack's other settings, before
anything changes: the GcuResource model, its name (a GcuResource keeps its name, as in gum), then the whole plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from components.blueprint import GcuResource, deployed_components
from components.errors import BlueprintError, describe
from components.plan import checks
from components.settings import NAMESPACE, load_settings, read_blueprint_file
from service.gum import GumError

# The stack config keys a blueprint from the service replaces: it is kept inline, so the stack does not depend on
# the file staying where it was.
BLUEPRINT_KEYS = (f"{NAMESPACE}:blueprint", f"{NAMESPACE}:spec", f"{NAMESPACE}:name")


def locate(directory: Path, name: Any) -> Path:
    """The file `name` in `directory`; a name that is not a relative path inside it is refused."""
    if not isinstance(name, str) or not name.strip():
        raise GumError(400, 'the body\'s "file" must name a blueprint file, e.g. {"file": "gr.json"}')
    if "\0" in name or Path(name).is_absolute():
        raise GumError(400, f"file {name!r}: give a file name inside the blueprints directory {directory}, not a path")
    if len(name) > 255:
        raise GumError(400, f"file {name[:40]!r}...: a file name of {len(name)} characters; at most 255")
    root = directory.resolve()
    try:
        path = (root / name).resolve()
        found = path.is_file()
    except OSError as error:
        raise GumError(400, f"file {name!r}: {error.strerror}") from None
    if not path.is_relative_to(root) or path == root:
        raise GumError(400, f"file {name!r} leaves the blueprints directory {directory}: only files in it are read")
    if not found:
        raise GumError(404, f"file {name!r}: no such blueprint in {directory} (put it there first)")
    return path


def read(path: Path) -> dict:
    try:
        document = read_blueprint_file(path)
    except BlueprintError as error:
        raise GumError(422, str(error)) from None
    if not isinstance(document, dict):
        raise GumError(422, f"{path.name}: must hold one GcuResource object (apiVersion, kind, metadata, spec)")
    try:
        GcuResource.model_validate(document)
    except ValidationError as error:
        raise GumError(422, f"{path.name}: " + "; ".join(describe(error, GcuResource))) from None
    return document


def stack_config_for(document: dict, config: Mapping[str, Any]) -> dict[str, Any]:
    """The stack's config with the blueprint inline in place of whichever blueprint it had."""
    values = {k: v for k, v in config.items() if k not in BLUEPRINT_KEYS}
    values[f"{NAMESPACE}:spec"] = json.dumps(document.get("spec") or {})
    values[f"{NAMESPACE}:name"] = document["metadata"]["name"]
    return values


def _resource(config: Mapping[str, Any], project_dir: Path, secret_keys: frozenset[str]) -> Optional[GcuResource]:
    """The GcuResource `config` deploys (None: it does not validate)."""
    try:
        return load_settings(config, project_dir, secret_keys).resource
    except BlueprintError:
        return None


def _document(resource: GcuResource) -> dict:
    return resource.model_dump(mode="json", by_alias=True, exclude_none=True)


def _keys(resource: GcuResource) -> set[str]:
    return {c.definition.key for c in deployed_components(resource.spec)}


def spec_part(config: Mapping[str, Any], key: str, project_dir: Path, secret_keys: frozenset[str]) -> Any:
    """spec.<key> of the blueprint `config` deploys, as its model reads it (None: not deployed); a config that does not
    validate reads as a part unlike any other."""
    resource = _resource(config, project_dir, secret_keys)
    return object() if resource is None else _document(resource)["spec"].get(key)


def deployed_keys(config: Mapping[str, Any], project_dir: Path, secret_keys: frozenset[str]) -> Optional[set[str]]:
    """The spec keys of the components `config` deploys (None: it does not validate)."""
    resource = _resource(config, project_dir, secret_keys)
    return None if resource is None else _keys(resource)


def keeping_only(config: Mapping[str, Any], key: str, project_dir: Path, secret_keys: frozenset[str]) -> Optional[dict]:
    """The stack config that deploys spec.<key> of what `config` deploys and nothing else (None: it does not deploy
    that part, or does not validate)."""
    resource = _resource(config, project_dir, secret_keys)
    if resource is None or key not in _keys(resource):
        return None
    document = _document(resource)
    document["spec"] = {key: document["spec"][key]}
    return stack_config_for(document, config)


def check(document: dict, stack: str, config: Mapping[str, Any], secret_keys: frozenset[str], project_dir: Path) -> dict:
    """The stack config that deploys `document` on `stack`, after every check a preview makes before declaring."""
    name = (document.get("metadata") or {}).get("name")
    if name != stack:
        raise GumError(
            422, f"the blueprint's metadata.name is {name!r}, not {stack!r}: a GcuResource keeps its name "
            f"(set metadata.name to {stack!r}, or address the GcuResource it names)"
        )
    values = stack_config_for(document, config)
    try:
        checks.check(load_settings(values, project_dir, secret_keys))
    except BlueprintError as error:
        raise GumError(422, str(error)) from None
    return values
