"""`pulumi up` wall time for the default blueprint with the real engine, on 3 and on 100
simulated nodes (local control plane + kwok), and the chain's serial stages.

    .venv/bin/python bench/engine_up.py [--nodes 3 100]

Needs the toolchain (scripts/toolchain.sh). Each size gets a fresh cluster and stack.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from engine import GCU_NODE_LABELS, GCUS, engine_stack  # noqa: E402

from components import links  # noqa: E402
from components.chain import stages  # noqa: E402
from components.settings import load_settings  # noqa: E402


def nodes(count: int) -> list:
    gcu = max(1, count * 2 // 3)
    return [(f"gcu-node-{i}", GCU_NODE_LABELS, GCUS) for i in range(gcu)] + [
        (f"cpu-node-{i}", {}) for i in range(count - gcu)
    ]


def measure(count: int) -> float:
    with tempfile.TemporaryDirectory() as workdir, \
            engine_stack(Path(workdir), nodes(count), f"bench{count}", check_destroy=True) as engine:
        started = time.perf_counter()
        engine.stack.up(on_output=lambda _: None)
        seconds = time.perf_counter() - started
        ready = engine.stack.outputs()["readyResource"].value
    print(f"  {count:4d} nodes: pulumi up {seconds:6.1f} s (readyResource {ready})")
    return seconds


def serial_stages() -> None:
    settings = load_settings({"gcu-stack:blueprint": "blueprints/gcu-resource.json"}, ROOT)
    deployed = {c.definition.key for c in settings.deployed()}
    components = len(deployed)
    ours = stages(links.GRAPH, links.present(deployed))
    print(f"serial stages for the default blueprint: {len(ours)} ({' -> '.join('+'.join(s) for s in ours)}),")
    print(f"  the docker-runtime activation runs inside the toolkit stage; gcu-operator: {components} strictly serial")
    print(f"  components plus a docker restart: component stages {len(ours) - 1} vs {components}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 100])
    args = parser.parse_args()
    serial_stages()
    results = {count: measure(count) for count in args.nodes}
    if len(results) > 1:
        small, large = min(results), max(results)
        print(f"  ratio {large}/{small} nodes: {results[large] / results[small]:.2f}x")


if __name__ == "__main__":
    main()
