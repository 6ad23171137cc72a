"""Building blocks of `gcu-stack:*` settings models (each link owns the keys it reads)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model


def one_setting(model_name: str, attribute: str, key: str, type_: type[BaseModel], doc: str = "") -> type[BaseModel]:
    """A settings model holding one structured stack setting `gcu-stack:<key>` as `.<attribute>`."""
    field: Any = (type_, Field(default_factory=type_, alias=key))
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), __doc__=doc or type_.__doc__, **{attribute: field})


def merged_settings(model_name: str, *models: type[BaseModel]) -> type[BaseModel]:
    """One settings model with the fields of several (a link that also reads another link's keys)."""
    fields: dict[str, Any] = {}
    for model in models:
        for name, info in model.model_fields.items():
            fields[name] = (info.annotation, info)
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
