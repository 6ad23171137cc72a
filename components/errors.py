"""Turning validation failures into messages that name the field and what to do."""

from __future__ import annotations

import difflib
import typing
from typing import Any, Iterable, Optional, Sequence

from pydantic import BaseModel, ValidationError


class BlueprintError(Exception):
    """A blueprint or stack setting is invalid. Raised before any resource is declared."""

    def __init__(self, problems: Sequence[str], source: Optional[str] = None):
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid GcuResource blueprint{where}:\n{lines}")


def _model_class(annotation: Any) -> Optional[type[BaseModel]]:
    """The pydantic model inside Optional[...], list[...] or Annotated[...], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_class(arg)
        if found is not None:
            return found
    return None


def _model_at(root: type[BaseModel], loc: Iterable[Any]) -> Optional[type[BaseModel]]:
    model: Optional[type[BaseModel]] = root
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if (f.alias or n) == part), None
        )
        if field is None:
            return None
        model = _model_class(field.annotation)
    return model


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()] + list(getattr(model, "extra_keys", ()))


def _path(prefix: str, loc: Sequence[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return prefix + text


def describe(error: ValidationError, root: type[BaseModel], prefix: str = "") -> list[str]:
    """One line per problem: `<field path>: <what is wrong and what is allowed>`."""
    problems = []
    for item in error.errors(include_url=False):
        loc = [p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        kind = item["type"]
        path = _path(prefix, loc)
        if kind == "extra_forbidden":
            model = _model_at(root, loc[:-1])
            allowed = _allowed_keys(model) if model else []
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"allowed: {', '.join(allowed)}"
            problems.append(f"{path}: unknown field ({hint})")
        elif kind == "literal_error":
            expected = item.get("ctx", {}).get("expected", "")
            choices = expected.replace("'", "").replace(" or ", ", ")
            problems.append(f"{path}: must be one of {choices} (got {item['input']!r})")
        elif kind == "missing":
            problems.append(f"{path}: required field is missing")
        elif kind == "value_error":
            message = str(item["ctx"].get("error", item["msg"]))
            # Cross-field checks already name their fields (e.g. spec.devicePlugin); a message
            # starting with "[i]" continues the path (an item of a list field).
            if message.startswith(f"{path}."):
                problems.append(message)
            elif message.startswith("["):
                problems.append(f"{path}{message}")
            else:
                problems.append(f"{path}: {message}")
        elif kind == "string_type" and isinstance(item["input"], (bool, int, float)):
            # YAML reads true, 1.10 or 0.1 unquoted as non-strings.
            problems.append(f"{path}: must be a string; quote it (got {item['input']!r})")
        else:
            problems.append(f"{path}: {item['msg'].lower()} (got {item['input']!r})")
    return problems
