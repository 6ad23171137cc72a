"""The GCU-share device plugin (components/catalog/gcushare_plugin.py)."""

import json

import pytest
from harness import fails, full_spec, pod_spec, run_full, run_program, seed_spec


def test_gcushare_plugin_gets_memory_unit_and_takes_the_device_plugin_place(full):
    ds = full.one("DaemonSet", "gcushare-device-plugin")
    container = pod_spec(ds)["containers"][0]
    assert "--memory-unit=1" in container["args"]
    assert "kubernetes.io/hostname" not in json.dumps(pod_spec(ds).get("affinity", {}))
    runtime = full.of_type("pulumi-python:dynamic/gcu:ContainerRuntime")[0].urn
    assert runtime in ds.dependencies
    assert ds.urn in full.one("DaemonSet", "enflame-gcu-exporter").dependencies
    assert not [r for r in full.k8s() if r.k8s_name == "enflame-gcu-k8s-plugin"]


def test_gcushare_nodes_limit_the_plugin():
    run = run_full(full_spec(**{"gcusharePlugin.gcushareNodes": ["gcu-node-1", "gcu-node-3"], "gcusharePlugin.memoryUnit": "0.01"}))
    spec = pod_spec(run.one("DaemonSet", "gcushare-device-plugin"))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gcu-node-1", "gcu-node-3"]} in terms["matchExpressions"]
    assert "--memory-unit=0.01" in spec["containers"][0]["args"]


def test_memory_unit_must_be_one_of_the_share_levels():
    spec = seed_spec(**{"gcusharePlugin.memoryUnit": "0.5"})
    fails({"spec": spec}, "spec.gcusharePlugin.memoryUnit: must be one of 1, 0.1, 0.01, 0.001")


@pytest.mark.parametrize("unit", ["1", "0.1", "0.01", "0.001", 1, 0.1])
def test_memory_unit_accepts_every_level_as_string_or_number(unit):
    spec = seed_spec(**{"gcusharePlugin.memoryUnit": unit})
    run_program({"spec": spec})
