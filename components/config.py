"""Building blocks of `gcu-stack:*` settings models (each link owns the keys it reads)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model


def one_setting(model_name: str, attribute: str, key: str, type_: type[BaseModel], doc: str = "") -> type[BaseModel]:
    """A settings model holding one structured stack setting `gcu-stack:<key>` as `.<attribute>`."""
    field: Any = (type_, Field(default_factory=type_, alias=key))
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), __doc__=doc or type_.__doc__, **{attribute: field})
