"""The dependency chain: who waits for whom, skipping what is not deployed."""

from __future__ import annotations

from typing import Collection, Mapping


def nearest_deployed(key: str, after: Mapping[str, tuple[str, ...]], present: Collection[str]) -> list[str]:
    """Predecessors `key` must wait for.

    A direct predecessor that is not deployed is replaced by its own predecessors,
    transitively, so a component waits for the nearest deployed one(s).
    """
    found: list[str] = []
    for predecessor in after.get(key, ()):
        candidates = [predecessor] if predecessor in present else nearest_deployed(predecessor, after, present)
        found.extend(c for c in candidates if c not in found)
    # Keep only the latest: waiting for the device plugin already implies waiting for the toolkit.
    return [c for c in found if not any(c in _ancestors(other, after, present) for other in found if other != c)]


def _ancestors(key: str, after: Mapping[str, tuple[str, ...]], present: Collection[str]) -> set[str]:
    seen: set[str] = set()
    for predecessor in nearest_deployed(key, after, present):
        seen.add(predecessor)
        seen |= _ancestors(predecessor, after, present)
    return seen


def stages(after: Mapping[str, tuple[str, ...]], present: Collection[str]) -> list[list[str]]:
    """Deployed keys grouped by depth: each stage can roll out once the previous ones are ready."""
    depth: dict[str, int] = {}

    def level(key: str) -> int:
        if key not in depth:
            depth[key] = 1 + max((level(p) for p in nearest_deployed(key, after, present)), default=-1)
        return depth[key]

    grouped: dict[int, list[str]] = {}
    for key in present:
        grouped.setdefault(level(key), []).append(key)
    return [sorted(grouped[d]) for d in sorted(grouped)]
