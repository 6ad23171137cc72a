"""The shape every bundled dynamic resource shares: inputs as one dataclass, outputs declared up front."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Optional

import pulumi
from pulumi.dynamic import ResourceProvider


def as_props(inputs: Any) -> dict:
    """An inputs dataclass as resource properties (not dataclasses.asdict: it deep-copies Outputs)."""
    return {f.name: getattr(inputs, f.name) for f in fields(inputs)}


class Bundled(pulumi.dynamic.Resource):
    """A bundled dynamic resource: its inputs dataclass as properties, its outputs unknown until the provider reports.

    Every property is an Output attribute of the resource (e.g. `GcuNodes(...).nodes`).
    The providers hold no clients and read no globals: every call builds what it needs
    from the resource's own properties, so the pickled provider carries no state.
    """

    PROVIDER: type[ResourceProvider]
    OUTPUTS: tuple[str, ...]

    def __init__(self, name: str, inputs: Any, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(self.PROVIDER(), name, {**as_props(inputs), **dict.fromkeys(self.OUTPUTS)}, opts)
