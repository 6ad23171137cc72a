"""gcu-upgrade-manager in the cluster on an S3 backend, its credentials from the operator's Secret
(`gcu-stack:upgradeManagerBackendSecret`): the CLI and the service in its pod are one owner of one backend URL.

The backend is a real S3 API that checks every request's signature (tests/s3_fixtures.py: moto's server): the pod
lists, reads and upgrades the stack only with the access key the kubelet put into its environment from the Secret.
A real kubelet with its own containerd (devtools/realnode.py) runs the service's image; the rest of the seed are the
stand-ins of devtools/standin_node.py. Extended leg: the image and a `pulumi up` inside a pod take minutes.
"""

from __future__ import annotations

import base64
import json
import os
import secrets

import pytest
from engine import real_node_stack, up_converged
from pulumi import automation as auto
from s3_fixtures import s3_server
from service_fixtures import Service

from devtools import standin_node

pytestmark = [pytest.mark.extended, pytest.mark.timeout(3600)]

NAME = "enflame-gcu-resource"
NODE = f"gum-s3-{os.getpid()}"
LABELS = {"enflame.com/gcu.driver.present": "true"}
TOKEN = secrets.token_hex(24)
PASSPHRASE = "e2e-passphrase"   # the test stacks' (tests/engine.py pulumi_env)
EXPORTER_TAG = "e2e-2"
BACKEND_SECRET = "gcu-stack-backend"


def secret(name: str, data: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "kube-system"},
                       "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


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
        cluster.kubectl("apply", "-f", "-", input=secret("gcu-upgrade-manager",
                                                         {"token": TOKEN, "passphrase": PASSPHRASE}))
        cluster.kubectl("apply", "-f", "-", input=secret(BACKEND_SECRET, s3.credentials()))
        policy = standin_node.policy_config()
        policy["host-paths-allowed"] = {"allowedHostPaths": {"upgradeManager": [str(project), str(data)]}}
        (project / ".state").mkdir(exist_ok=True)
        (project / ".state" / f"policy-{NAME}.json").write_text(json.dumps(policy))
        service = Service(url=f"http://{node.node_ip}:32765", token=TOKEN, log=root / "pod.log", process=None,
                          oplog=data / "op-log", blueprints=data / "blueprints")
        yield {"cluster": cluster, "node": node, "stack": stack, "service": service, "s3": s3}


def keep_log(real) -> None:
    """The service pod's log (and the S3 server's), where Service.tail() reads them for failure messages."""
    cluster = real["cluster"]
    try:
        (found,) = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l",
                                              "app.kubernetes.io/component=upgradeManager", "-o", "json").stdout)["items"]
        text = real["node"].pod_log("kube-system", found["metadata"]["name"])
    except Exception as error:  # noqa: BLE001 - a diagnosis aid only
        text = f"(no log: {error})"
    real["service"].log.write_text(f"{text}\n--- S3 server:\n{real['s3'].tail()}")


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
    keep_log(gum)
    assert status == 200 and listed["result"] == "Success", (listed, service.tail())
    assert [item["metadata"]["name"] for item in listed["content"]["items"]] == [NAME], (listed, service.tail())
    status, got = service.curl(f"/gum/v1/gr/{NAME}")
    assert status == 200 and got["content"]["status"]["phase"] == "Running", (got, service.tail())
    assert got["content"]["status"]["upgradeManager"]["backend"].startswith("s3://")


def test_3_an_upgrade_by_the_service_is_the_clis_stack_too(gum):
    service, stack = gum["service"], gum["stack"]
    spec = standin_node.blueprint(upgrade_manager_node=NODE)["spec"]
    spec["exporter"]["version"] = EXPORTER_TAG
    service.blueprints.mkdir(parents=True, exist_ok=True)
    (service.blueprints / "gr.json").write_text(json.dumps({
        "apiVersion": "topsops.enflame.com/v1", "kind": "GcuResource", "metadata": {"name": NAME}, "spec": spec}))
    status, body = service.curl(f"/gum/v1/gr/{NAME}", data='{"file": "gr.json"}', method="PUT")
    assert status == 200 and body["result"] == "Success", body
    done = service.wait_for(body["operationId"], timeout=1200)
    keep_log(gum)
    assert done["phase"] == "succeeded", (done, service.tail())
    # The CLI, on the same URL, reads the service's update and its blueprint, and converges on them.
    assert stack.history(page_size=1, page=1)[0].result == "succeeded"
    assert json.loads(stack.get_all_config()["gcu-stack:spec"].value)["exporter"]["version"] == EXPORTER_TAG
    up_converged(stack, on_output=lambda _: None)
    for file in service.blueprints.iterdir():  # the directory stays: the pod has it mounted
        file.unlink()
