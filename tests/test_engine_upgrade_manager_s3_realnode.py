"""gcu-upgrade-manager in the cluster on an S3 backend, its credentials from the operator's Secret
(`gcu-stack:upgradeManagerBackendSecret`): the CLI and the service in its pod are one owner of one backend URL.

The backend is a real S3 API that checks every request's signature (tests/s3_fixtures.py: moto's server): the pod
lists, reads and upgrades the stack only with the access key the kubelet put into its environment from the Secret.
A real kubelet with its own containerd (devtools/realnode.py) runs the service's image; the rest of the seed are the
stand-ins of devtools/standin_node.py. Extended leg: the image and a `pulumi up` inside a pod take minutes.
"""

from __future__ import annotations

import json
import os
import secrets

import pytest
from engine import real_node_stack, up_converged
from gum_realnode import EXPORTER_TAG, PASSPHRASE, keep_log, put_exporter_upgrade, secret_manifest, write_policy
from gum_realnode import GCU_RESOURCE as NAME
from pulumi import automation as auto
from s3_fixtures import s3_server
from service_fixtures import Service

from devtools import standin_node

pytestmark = [pytest.mark.extended, pytest.mark.timeout(3600)]

NODE = f"gum-s3-{os.getpid()}"
LABELS = {"enflame.com/gcu.driver.present": "true"}
TOKEN = secrets.token_hex(24)
BACKEND_SECRET = "gcu-stack-backend"


@pytest.fixture(scope="module")
def gum(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-upgrade-manager-s3")
    spec = standin_node.blueprint(upgrade_manager_node=NODE)["spec"]
    with s3_server(root / "s3") as s3, real_node_stack(
            root, NODE, LABELS, spec, name=NAME, upgrade_manager=True,
            extra_tags={standin_node.image_ref("exporter"): EXPORTER_TAG}) as (cluster, node, stack, _):
        project, data = root / "project", root / "gum"
        # The one URL both use: the bucket at this machine's address on the node's link, which the pod reaches too.
        url = s3.backend_url(node.host_ip)
        env = stack.workspace.env_vars
        env.update({"PULUMI_BACKEND_URL": url, **s3.credentials(), "KUBECONFIG": str(cluster.kubeconfig)})
        # The stack moves to the bucket before anything is deployed (same project, same Pulumi.<stack>.yaml); the
        # block's end destroys it there.
        stack = auto.Stack.create(NAME, stack.workspace)
        stack.remove_config("gcu-stack:kubeconfig")
        stack.set_all_config({f"gcu-stack:{key}": auto.ConfigValue(value) for key, value in {
            "upgradeManagerStacksDir": str(project), "upgradeManagerBackendUrl": url,
            "upgradeManagerBackendSecret": BACKEND_SECRET, "upgradeManagerDataDir": str(data)}.items()})
        cluster.kubectl("apply", "-f", "-", input=secret_manifest("gcu-upgrade-manager",
                                                                  {"token": TOKEN, "passphrase": PASSPHRASE}))
        cluster.kubectl("apply", "-f", "-", input=secret_manifest(BACKEND_SECRET, s3.credentials()))
        write_policy(project, [str(project), str(data)])
        service = Service(url=f"http://{node.node_ip}:32765", token=TOKEN, log=root / "pod.log", process=None,
                          oplog=data / "op-log", blueprints=data / "blueprints")
        yield {"cluster": cluster, "node": node, "stack": stack, "service": service, "s3": s3}


def test_1_the_cli_deploys_the_service_with_the_state_in_the_bucket(gum):
    s3 = gum["s3"]
    assert s3.keys(secret="not-the-key") == {"error": "SignatureDoesNotMatch"}  # the server checks signatures
    up_converged(gum["stack"])
    keys = s3.keys()["keys"]
    assert any(key.endswith(f"/{NAME}.json") for key in keys), keys
    outputs = gum["stack"].outputs()["upgradeManager"].value
    assert outputs["backend"].startswith(f"s3://{s3.bucket}?"), outputs
    # The credentials reach the pod by reference only: nothing of them is in the stack's state or its Deployment.
    state = json.dumps(gum["stack"].export_stack().deployment)
    assert s3.secret_access_key not in state


def test_2_gums_calls_read_the_bucket_with_the_secrets_credentials(gum):
    service = gum["service"]
    status, listed = service.curl("/gum/v1/gr")
    keep_log(gum, gum["s3"].tail)
    assert status == 200 and listed["result"] == "Success", (listed, service.tail())
    assert [item["metadata"]["name"] for item in listed["content"]["items"]] == [NAME], (listed, service.tail())
    status, got = service.curl(f"/gum/v1/gr/{NAME}")
    assert status == 200 and got["content"]["status"]["phase"] == "Running", (got, service.tail())
    assert got["content"]["status"]["upgradeManager"]["backend"].startswith("s3://")


def test_3_an_upgrade_by_the_service_is_the_clis_stack_too(gum):
    service, stack = gum["service"], gum["stack"]
    put_exporter_upgrade(gum, NODE, gum["s3"].tail)
    # The CLI, on the same URL, reads the service's update and its blueprint, and converges on them.
    assert stack.history(page_size=1, page=1)[0].result == "succeeded"
    assert json.loads(stack.get_all_config()["gcu-stack:spec"].value)["exporter"]["version"] == EXPORTER_TAG
    up_converged(stack, on_output=lambda _: None)
    for file in service.blueprints.iterdir():  # the directory stays: the pod has it mounted
        file.unlink()
