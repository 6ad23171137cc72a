"""The chain's links, components and steps alike, as one graph (`components/chain.py` orders it)."""

from __future__ import annotations

from typing import Collection, Union

from . import chain
from .catalog import COMPONENTS
from .model import ComponentDef, StepDef
from .steps import STEPS

Link = Union[ComponentDef, StepDef]

LINKS: dict[str, Link] = {link.key: link for link in (*COMPONENTS, *STEPS)}
GRAPH: dict[str, tuple[str, ...]] = {key: link.after for key, link in LINKS.items()}
chain.check(GRAPH)  # an unknown predecessor or a cycle fails on import, before any resource
ORDER: list[str] = chain.order(GRAPH, ties=list(LINKS))


def present(deployed: Collection[str]) -> set[str]:
    """The links of a stack deploying these components: them, and the steps they bring."""
    found = set(deployed)
    if deployed:
        found |= {s.key for s in STEPS if not s.with_any or any(k in deployed for k in s.with_any)}
    return found


def settings_models() -> dict[str, type]:
    """Each link's own stack-settings model, by link key (a component's step reads its owner's)."""
    return {key: link.settings for key, link in LINKS.items() if link.settings is not None}
