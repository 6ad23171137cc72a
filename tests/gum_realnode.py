"""What the real-node modules of the in-cluster upgrade service share (test_engine_upgrade_manager_realnode.py,
test_engine_upgrade_manager_s3_realnode.py): the operator's Secrets, the policy pack's settings for the service's
own runs, the service's pod and its log, and gum's PUT of an exporter upgrade run to its end."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Callable

from devtools import standin_node

GCU_RESOURCE = "enflame-gcu-resource"   # gum's examples' GcuResource
EXPORTER_TAG = "e2e-2"  # the stand-in exporter image under a second tag: an "upgrade" the node can run
PASSPHRASE = "e2e-passphrase"   # the test stacks' (tests/engine.py pulumi_env)


def secret_manifest(name: str, data: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "kube-system"},
                       "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


def write_policy(project: Path, allowed: list[str]) -> None:
    """The pack's settings for the service's previews and ups, where it keeps them (its state directory), as
    scripts/gcu-stack keeps the CLI's: the stand-ins' repository, and the service's directories on its node."""
    policy = standin_node.policy_config()
    policy["host-paths-allowed"] = {"allowedHostPaths": {"upgradeManager": allowed}}
    (project / ".state").mkdir(exist_ok=True)
    (project / ".state" / f"policy-{GCU_RESOURCE}.json").write_text(json.dumps(policy))


def pod(cluster) -> dict:
    found = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l",
                                       "app.kubernetes.io/component=upgradeManager", "-o", "json").stdout)["items"]
    assert len(found) == 1, [p["metadata"]["name"] for p in found]
    return found[0]


def keep_log(real, *more: Callable[[], str]) -> None:
    """The service pod's log (and what each of `more` reads, e.g. another server's log), where Service.tail() reads it
    for failure messages."""
    try:
        text = real["node"].pod_log("kube-system", pod(real["cluster"])["metadata"]["name"])
    except Exception as error:  # noqa: BLE001 - a diagnosis aid only
        text = f"(no log: {error})"
    real["service"].log.write_text("\n".join((text, *(read() for read in more))))


def blueprint_file(real, node: str, exporter_version: str) -> str:
    """gr.json in the service's blueprints directory: the stand-ins' blueprint with this exporter version."""
    spec = standin_node.blueprint(upgrade_manager_node=node)["spec"]
    spec["exporter"]["version"] = exporter_version
    document = {"apiVersion": "topsops.enflame.com/v1", "kind": "GcuResource", "metadata": {"name": GCU_RESOURCE},
                "spec": spec}
    real["service"].blueprints.mkdir(parents=True, exist_ok=True)
    (real["service"].blueprints / "gr.json").write_text(json.dumps(document, indent=2))
    return "gr.json"


def put_exporter_upgrade(real, node: str, *log: Callable[[], str]) -> dict:
    """gum's PUT of a blueprint that changes the exporter's version, run to its end: the finished operation."""
    service = real["service"]
    status, body = service.curl(f"/gum/v1/gr/{GCU_RESOURCE}",
                                data=json.dumps({"file": blueprint_file(real, node, EXPORTER_TAG)}), method="PUT")
    assert status == 200 and body["result"] == "Success", body
    done = service.wait_for(body["operationId"], timeout=1200)
    keep_log(real, *log)
    assert done["phase"] == "succeeded", (done, service.tail())
    return done
