"""The GCU-share scheduler extender (components/catalog/gcushare_scheduler.py)."""

import yaml
from k8s_schema import normalise


def test_scheduler_extender_objects_rbac_and_outputs(full):
    deployment = full.one("Deployment", "gcushare-scheduler-extender")
    assert deployment.inputs["metadata"]["namespace"] == "kube-system"
    service = normalise(full.one("Service", "gcushare-scheduler-extender").inputs)
    assert service["spec"]["ports"][0]["nodePort"] == 32766
    role = full.one("ClusterRole", "gcushare-scheduler-extender").inputs["rules"]
    verbs = {v for rule in role for v in rule["verbs"]}
    assert not verbs & {"*", "escalate", "bind", "impersonate", "delete", "update"}
    assert {r for rule in role for r in rule["resources"]} == {"nodes", "pods", "bindings", "pods/binding", "events"}
    extender = full.outputs["gcushareSchedulerExtender"]
    assert extender["url"] == "http://127.0.0.1:32766/gcushare-scheduler"
    config = yaml.safe_load(extender["schedulerConfiguration"])
    assert config["extenders"][0]["urlPrefix"] == extender["url"]
    assert config["extenders"][0]["managedResources"][0]["name"] == "enflame.com/gcu-memory"
