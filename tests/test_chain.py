"""The chain as data (components/chain.py, links.py): a graph, ordered topologically, checked."""

import pytest

from components import links
from components.chain import ChainError, check, nearest_deployed, order, stages

AFTER = links.GRAPH


@pytest.mark.parametrize(
    "present, key, expected",
    [
        ({"nfd", "gcuNodes", "driver", "toolkit"}, "toolkit", ["driver"]),
        ({"nfd", "gcuNodes", "toolkit"}, "toolkit", ["gcuNodes"]),
        ({"gcuNodes", "toolkit", "exporter"}, "exporter", ["toolkit"]),
        ({"nfd", "exporter"}, "exporter", ["nfd"]),
        ({"exporter"}, "exporter", []),
    ],
)
def test_nearest_deployed(present, key, expected):
    assert nearest_deployed(key, AFTER, present) == expected


def test_stages_of_the_seed_chain():
    present = {"nfd", "gcuNodes", "toolkit", "devicePlugin", "exporter", "gfd"}
    assert stages(AFTER, present) == [["nfd"], ["gcuNodes"], ["toolkit"], ["devicePlugin"], ["exporter", "gfd"]]


def test_the_real_graph_is_a_chain_and_its_order_respects_every_edge():
    check(links.GRAPH)
    position = {key: i for i, key in enumerate(links.ORDER)}
    assert set(position) == set(links.GRAPH)
    for key, after in links.GRAPH.items():
        for predecessor in after:
            assert position[predecessor] < position[key], (predecessor, key)


def test_order_does_not_depend_on_how_the_catalog_is_listed():
    shuffled = dict(reversed(list(links.GRAPH.items())))
    assert order(shuffled, ties=list(links.GRAPH)) == links.ORDER


def test_an_edge_to_an_unknown_link_is_named():
    with pytest.raises(ChainError, match="exporter -> devicePluginn"):
        check({"nfd": (), "exporter": ("devicePluginn",)})


def test_a_cycle_is_refused_naming_its_links():
    with pytest.raises(ChainError, match="cycle among: a, b"):
        check({"nfd": (), "a": ("b",), "b": ("a",)})


def test_ties_keep_the_listed_order():
    graph = {"nfd": (), "gfd": ("nfd",), "exporter": ("nfd",)}
    assert order(graph, ties=["nfd", "exporter", "gfd"]) == ["nfd", "exporter", "gfd"]
    assert order(graph, ties=["nfd", "gfd", "exporter"]) == ["nfd", "gfd", "exporter"]


def test_no_component_name_in_the_generic_chain_code():
    """Generic code reads the graph; only catalog entries and steps name components."""
    import re
    from pathlib import Path

    from components.catalog import COMPONENTS

    root = Path(__file__).resolve().parent.parent / "components"
    keys = [c.key for c in COMPONENTS] + [s.key for s in links.STEPS]
    for module in ("program.py", "chain.py", "links.py", "declare/stack.py", "declare/component.py", "declare/status.py",
                   "declare/k8s.py", "plan/checks.py", "plan/objects.py", "plan/rules.py"):
        text = (root / module).read_text()
        named = [k for k in keys if re.search(rf"[\"']{k}[\"']", text)]
        assert named == [], f"{module} names {named}"
