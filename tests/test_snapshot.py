"""What the program declares, pinned: every registration's URN, parent, dependencies and inputs.

A refactor must not move a URN or change an input, or existing stacks would see
replacements. The snapshots in tests/snapshots/ were written by the program as it was
before the architecture refactor; an intended change of what is declared updates them
deliberately (and shows in review as a diff of the JSON):

    GCU_UPDATE_SNAPSHOTS=1 scripts/test.sh -k test_snapshot
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from harness import SEED_BLUEPRINT, run_program
from k8s_schema import normalise

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
SEED = json.loads(SEED_BLUEPRINT.read_text())
PASSWORD = "snapshot-Db-pa55"


def _with(spec: dict, **changes: dict) -> dict:
    spec = json.loads(json.dumps(spec))
    for key, fields in changes.items():
        spec.setdefault(key, {}).update(fields)
    return spec


# Between them, every component and every optional object: GCU-share instead of the device
# plugin in one, the device plugin with the driver and a ServiceMonitor in the other.
VARIANTS = {
    "seed": {"blueprint": str(SEED_BLUEPRINT)},
    "every-component-gcushare": {
        "spec": _with(
            SEED["spec"],
            driver={"notDeploy": False},
            devicePlugin={"notDeploy": True},
            gcusharePlugin={"notDeploy": False, "memoryUnit": "0.1", "gcushareNodes": ["gcu-node-2"]},
            gcushareScheduler={"notDeploy": False},
            nightingale={"notDeploy": False},
            volcano={"notDeploy": False},
        ),
        "nightingaleDbPassword": PASSWORD,
    },
    "every-component-device-plugin": {
        "spec": _with(SEED["spec"], driver={"notDeploy": False}, nightingale={"notDeploy": False}, volcano={"notDeploy": False}),
        "nightingaleDbPassword": PASSWORD,
        "exporterServiceMonitor": True,
    },
}


def declared(config: dict) -> list[dict]:
    run = run_program(config, secret_keys=("nightingaleDbPassword",) if "nightingaleDbPassword" in config else ())
    entries = []
    for r in run.registrations:
        # A dynamic resource's pickled provider changes with any code change; its inputs are what count.
        inputs = {k: v for k, v in r.inputs.items() if k != "__provider"}
        entries.append(
            {
                "urn": r.urn,
                "type": r.type,
                "parent": r.parent,
                "custom": r.custom,
                "provider": r.provider,
                "dependencies": sorted(r.dependencies),
                "inputs": normalise(inputs),
            }
        )
    return sorted(entries, key=lambda e: e["urn"])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_declared_objects_and_urns_match_the_snapshot(variant):
    got = declared(VARIANTS[variant])
    path = SNAPSHOTS / f"{variant}.json"
    if os.environ.get("GCU_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(path.read_text())
    assert [e["urn"] for e in got] == [e["urn"] for e in want], "URNs moved"
    for mine, theirs in zip(got, want, strict=True):
        assert mine == theirs, mine["urn"]
