"""The dependency chain as data: a graph of links (components and steps), each naming what it comes after.

The build order is computed from the graph (a topological order); a link that is not
deployed is skipped and its successors wait for its nearest deployed predecessors.
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

Graph = Mapping[str, tuple[str, ...]]


class ChainError(ValueError):
    """The graph is not a chain: an edge to an unknown link, or a cycle."""


def check(graph: Graph) -> None:
    """Raise ChainError naming every edge to an unknown link, or the links of a cycle."""
    unknown = [f"{key} -> {p}" for key, after in graph.items() for p in after if p not in graph]
    if unknown:
        raise ChainError(f"links come after unknown links: {', '.join(unknown)}")
    order(graph)


def order(graph: Graph, ties: Sequence[str] = ()) -> list[str]:
    """Every link after all of its predecessors; among links ready at once, by their place in `ties`
    (then by name), so the order is stable."""
    rank = {key: i for i, key in enumerate(ties)}
    waiting = {key: {p for p in after if p in graph} for key, after in graph.items()}
    done: list[str] = []
    while waiting:
        ready = sorted((k for k, preds in waiting.items() if not preds), key=lambda k: (rank.get(k, len(rank)), k))
        if not ready:
            raise ChainError(f"the chain has a cycle among: {', '.join(sorted(waiting))}")
        key = ready[0]
        done.append(key)
        del waiting[key]
        for preds in waiting.values():
            preds.discard(key)
    return done


def nearest_deployed(key: str, after: Graph, present: Collection[str]) -> list[str]:
    """Predecessors `key` must wait for.

    A direct predecessor that is not deployed is replaced by its own predecessors,
    transitively, so a link waits for the nearest deployed one(s).
    """
    found: list[str] = []
    for predecessor in after.get(key, ()):
        candidates = [predecessor] if predecessor in present else nearest_deployed(predecessor, after, present)
        found.extend(c for c in candidates if c not in found)
    # Keep only the latest: waiting for the device plugin already implies waiting for the toolkit.
    return [c for c in found if not any(c in _ancestors(other, after, present) for other in found if other != c)]


def _ancestors(key: str, after: Graph, present: Collection[str]) -> set[str]:
    seen: set[str] = set()
    for predecessor in nearest_deployed(key, after, present):
        seen.add(predecessor)
        seen |= _ancestors(predecessor, after, present)
    return seen


def stages(after: Graph, present: Collection[str]) -> list[list[str]]:
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
