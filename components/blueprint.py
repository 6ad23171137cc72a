"""The GcuResource document, assembled from the catalog: one `spec` field per component.

A blueprint file written for gcu-operator 2.0 validates unchanged: the field names are
the CR's own, every model forbids unknown fields, and each component's entry brings its
spec model, its old names (`plugin`) and the components it excludes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional

from pydantic import Field, create_model, model_validator

from .catalog import COMPONENTS
from .model import ComponentDef, ResolvedComponent
from .resolve import resolve
from .spec import BaseFields, Metadata, Model, deployed


class SpecBase(Model):
    """`spec` of a GcuResource: one key per component; an absent key is not deployed."""

    # Keys accepted besides the fields (old names of a component), for error hints.
    extra_keys: ClassVar[tuple[str, ...]] = ()

    def part(self, key: str) -> Optional[BaseFields]:
        return getattr(self, key)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        for component in COMPONENTS:
            for alias in component.spec_aliases:
                if isinstance(data, dict) and alias in data:
                    data = dict(data)
                    if data.get(component.key) is not None:
                        raise ValueError(f"`{alias}` and `{component.key}` name the same component; keep one of them")
                    data[component.key] = data.pop(alias)
        return data

    @model_validator(mode="after")
    def _exclusive(self) -> "SpecBase":
        for component in COMPONENTS:
            for other in component.excludes:
                if deployed(self.part(component.key)) and deployed(self.part(other)):
                    raise ValueError(
                        f"spec.{component.key} and spec.{other} cannot both be deployed: "
                        f"set spec.{component.key}.notDeploy: true to use spec.{other}, "
                        f"or spec.{other}.notDeploy: true to keep spec.{component.key}"
                    )
        return self


def _spec_field(component: ComponentDef) -> tuple[Any, Any]:
    model = component.spec_model or BaseFields
    return Optional[model], Field(None, alias=component.key)


GcuResourceSpec = create_model(
    "GcuResourceSpec",
    __base__=SpecBase,
    __doc__=SpecBase.__doc__,
    **{c.key: _spec_field(c) for c in COMPONENTS},
)
GcuResourceSpec.extra_keys = tuple(a for c in COMPONENTS for a in c.spec_aliases)


class GcuResource(Model):
    # Where an editor finds the blueprint's JSON Schema (blueprints/gcu-resource.schema.json); not used here.
    json_schema: Optional[str] = Field(None, alias="$schema")
    api_version: Literal["topsops.enflame.com/v1"] = Field(alias="apiVersion")
    kind: Literal["GcuResource"]
    metadata: Metadata
    spec: GcuResourceSpec = Field(default_factory=GcuResourceSpec)  # type: ignore[valid-type]
    # A file exported from a cluster carries the old operator's status: read-only, ignored.
    status: Optional[dict[str, Any]] = None


def deployed_components(spec: SpecBase) -> list[ResolvedComponent]:
    """Resolved components this spec deploys, in catalog order."""
    return [resolve(c, spec.part(c.key), f"spec.{c.key}") for c in COMPONENTS if deployed(spec.part(c.key))]
