"""The service's refusals, with real curl against the real service process and a real stack in a file backend:
each bad request gets gum's envelope, a 4xx status and a message naming what was wrong, and changes nothing.
(What needs a cluster, an upgrade and a delete, is in test_engine_service.py.)"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import sys

import pytest
from pulumi import automation as auto
from realservers import PROJECT_DIR
from service_fixtures import TOKEN, new_stack, running_service, self_signed_certificate

from service import blueprints
from service.app import disturbs_the_service
from stackops.locks import project_name, run_lock_path

NAME = "enflame-gcu-resource"


@pytest.fixture(scope="module")
def stack_env(tmp_path_factory):
    """The stack's root directory, the stack, and the environment a service for it runs in."""
    root = tmp_path_factory.mktemp("service")
    stack, env = new_stack(root, NAME)
    return root, stack, {**os.environ, **env}


@pytest.fixture(scope="module")
def served(stack_env):
    root, stack, env = stack_env
    with running_service(root / "svc", root / "project", env) as service:
        yield service, stack, root


def config_of(stack: auto.Stack) -> dict:
    return {k: v.value for k, v in stack.get_all_config().items()}


def write_blueprint(service, name: str, mutate=None) -> None:
    document = json.loads((PROJECT_DIR / "blueprints" / "gcu-resource.json").read_text())
    if mutate:
        mutate(document)
    (service.blueprints / name).write_text(json.dumps(document))


def failed(status_body, status: int, operation: str, *words: str) -> None:
    got, body = status_body
    assert got == status and body["operation"] == operation and body["result"] == "Failed", status_body
    for word in words:
        assert word in body["error"], (word, body)


@pytest.mark.parametrize("args, words", [
    (["--no-auth", "--listen", "0.0.0.0:32765"], ["--no-auth on 0.0.0.0", "loopback"]),
    ([], ["no token", "--token-file"]),
    (["--token-file", "/dev/null"], ["at least 16 characters"]),
    (["--no-auth", "--blueprints", "/nonexistent/blueprints"], ["--blueprints /nonexistent/blueprints: no such directory"]),
])
def test_a_service_that_would_be_open_or_broken_does_not_start(args, words, tmp_path):
    done = subprocess.run([sys.executable, "-m", "service", "serve", "--blueprints", str(tmp_path), *args],
                          cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    for word in words:
        assert word in done.stderr, done.stderr


def test_tls_when_given_a_certificate(stack_env, tmp_path):
    """HTTPS with the operator's certificate, and nothing in plain HTTP on that port."""
    root, _, env = stack_env
    cert, key = self_signed_certificate(tmp_path / "tls", "127.0.0.1")
    with running_service(tmp_path / "svc", root / "project", env, "--tls-cert", str(cert),
                         "--tls-key", str(key)) as service:
        secure = dataclasses.replace(service, url=service.url.replace("http://", "https://"))
        status, listed = secure.curl("/gum/v1/gr", "--cacert", str(cert))
        assert status == 200 and listed["operation"] == "List" and listed["result"] == "Success", listed
        assert secure.curl("/gum/v1/gr", "--cacert", str(cert), token=None)[0] == 401
        plain = subprocess.run(["curl", "-sS", "--max-time", "20", service.url + "/gum/v1/gr"], capture_output=True,
                               text=True, timeout=60)
        assert plain.returncode != 0 and '"result"' not in plain.stdout, plain


def test_requests_need_the_token(served):
    service, _, _ = served
    failed(service.curl("/gum/v1/gr", token=None), 401, "List", "no bearer token")
    failed(service.curl("/gum/v1/gr", token="not-the-token-at-all"), 401, "List", "not this service's")
    failed(service.curl("/gum/v1/gr/x", "-X", "PUT", token=None, data='{"file": "gr.json"}'), 401, "Upgrade")
    status, body = service.curl("/healthz", token=None)
    assert status == 200 and body == {"status": "ok"}
    status, body = service.curl("/gum/v1/gr")
    assert (status, body["operation"], body["result"], body["content"]["items"]) == (200, "List", "Success", [])


def test_bad_names_kinds_files_and_bodies_are_refused_and_change_nothing(served):
    service, stack, _ = served
    before = config_of(stack)
    write_blueprint(service, "bad-field.json", lambda d: d["spec"]["exporter"].update(imagePullPolicy="Sometimes"))
    write_blueprint(service, "renamed.json", lambda d: d["metadata"].update(name="another-gcu-resource"))
    (service.blueprints / "broken.yaml").write_text("spec: [unclosed\n")
    failed(service.curl("/gum/v1/gr/unknown"), 404, "Get", 'gcuresources.topsops.enflame.com "unknown" not found')
    failed(service.curl(f"/gum/v1/gr/{NAME}"), 404, "Get", "holds nothing", "PUT a blueprint")
    failed(service.curl("/gum/v1/gr/Bad_Name"), 400, "Get", "not a GcuResource name")
    failed(service.curl(f"/gum/v1/gr/{NAME}/resource/gpu"), 400, "Get", "unknown resource kind 'gpu'", "driver", "plugin")
    put = f"/gum/v1/gr/{NAME}"
    failed(service.curl(put, method="PUT", data='{"file": "../../etc/passwd"}'), 400, "Upgrade", "leaves the blueprints directory")
    failed(service.curl(put, method="PUT", data='{"file": "/etc/passwd"}'), 400, "Upgrade", "not a path")
    failed(service.curl(put, method="PUT", data='{"file": "missing.json"}'), 404, "Upgrade", "no such blueprint")
    failed(service.curl(put, method="PUT", data="file=gr.json"), 400, "Upgrade", "not JSON")
    failed(service.curl(put, method="PUT", data='{"fiel": "gr.json"}'), 400, "Upgrade", "unknown field(s) in the body: fiel")
    failed(service.curl(put, method="PUT", data='{"file": "bad-field.json"}'), 422, "Upgrade", "spec.exporter.imagePullPolicy")
    failed(service.curl(put, method="PUT", data='{"file": "broken.yaml"}'), 422, "Upgrade", "broken.yaml", "not valid YAML")
    failed(service.curl(put, method="PUT", data='{"file": "renamed.json"}'), 422, "Upgrade",
           "metadata.name is 'another-gcu-resource'", "keeps its name")
    failed(service.curl("/gum/v1/gr/unknown", method="PUT", data='{"file": "renamed.json"}'), 404, "Upgrade", "not found")
    failed(service.curl(put, method="DELETE", data='{"policy": "sideways"}'), 400, "Delete", "policy 'sideways'")
    failed(service.curl(put, method="DELETE"), 404, "Delete", "holds nothing")
    big = service.blueprints.parent / "big-body"
    big.write_bytes(b'{"file": "' + b"a" * (10 * 1024 * 1024) + b'"}')
    failed(service.curl(put, "--data-binary", f"@{big}", method="PUT"), 413, "Upgrade", "at most 65536 are read")
    # Without a Content-Length (chunked): refused as it streams in.
    failed(service.curl(put, "--data-binary", f"@{big}", "-H", "Transfer-Encoding: chunked", method="PUT"), 413, "Upgrade",
           "over 65536 bytes")
    failed(service.curl(f"/gum/v1/gr/{NAME}/preview", method="POST", data='{"file": "bad-field.json"}'), 422, "Preview",
           "spec.exporter.imagePullPolicy")
    failed(service.curl("/gum/v1/nothing"), 404, "Request", "no route GET /gum/v1/nothing")
    # Nothing changed: the stack's config is as it was, and no operation was started.
    assert config_of(stack) == before
    status, body = service.curl("/gum/v1/operations")
    assert status == 200 and body["content"] == []
    logged = [(r["method"], r["path"], r["status"]) for r in service.oplog_records() if r["event"] == "request"]
    assert ("PUT", put, 422) in logged and ("DELETE", put, 400) in logged and ("PUT", put, 413) in logged


def test_a_change_while_the_stack_is_being_changed_is_refused_naming_who(served):
    service, stack, root = served
    write_blueprint(service, "gr.json")
    before = config_of(stack)
    # `scripts/gcu-stack up` holds the stack's run lock (flock) for its whole run and says who it is in the file.
    lock = run_lock_path(root / "backend", project_name(root / "project"), NAME)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        handle.write("`scripts/gcu-stack up` (pid 4242 on ops-host, started 2026-11-28T10:00:00Z)")
        handle.flush()
        failed(service.curl(f"/gum/v1/gr/{NAME}", method="PUT", data='{"file": "gr.json"}'), 409, "Upgrade",
               "being changed right now by `scripts/gcu-stack up` (pid 4242 on ops-host", "nothing was started")
    assert config_of(stack) == before


def test_the_service_in_the_cluster_does_not_replace_itself(stack_env, tmp_path):
    """In-cluster the service runs from its stack's upgradeManager (`--own-stack`): a PUT that changes that part would
    replace the pod in the middle of its own operation, so it is refused. (Its DELETE, which keeps the service, is in
    test_engine_service.py.)"""
    root, stack, env = stack_env
    before = config_of(stack)
    with running_service(tmp_path / "own", root / "project", env, "--own-stack", NAME) as own:
        write_blueprint(own, "with-service.json", lambda d: d["spec"].update(
            upgradeManager={"nodeSelector": {"kubernetes.io/hostname": "gcu-node-1"}}))
        failed(own.curl(f"/gum/v1/gr/{NAME}", method="PUT", data='{"file": "with-service.json"}'), 409, "Upgrade",
               "with-service.json changes spec.upgradeManager, this service itself", "with the CLI on the service's node")
        status, body = own.curl("/gum/v1/operations")
        assert status == 200 and body["content"] == []
    assert config_of(stack) == before


def test_what_a_delete_keeps_of_the_stack_running_the_service():
    """DELETE of the service's own stack deploys its part alone: the rest of the config as it was."""
    service = {"nodeSelector": {"kubernetes.io/hostname": "gcu-node-1"}}
    document = json.loads((PROJECT_DIR / "blueprints" / "gcu-resource.json").read_text())
    config = {"gcu-stack:spec": json.dumps({**document["spec"], "upgradeManager": service}),
              "gcu-stack:name": NAME, "gcu-stack:driverUpgrade": '{"maxParallel": 2}'}
    assert blueprints.deployed_keys(config, PROJECT_DIR, frozenset()) >= {"nfd", "toolkit", "upgradeManager"}
    kept = blueprints.keeping_only(config, "upgradeManager", PROJECT_DIR, frozenset())
    assert blueprints.deployed_keys(kept, PROJECT_DIR, frozenset()) == {"upgradeManager"}
    assert json.loads(kept["gcu-stack:spec"])["upgradeManager"]["nodeSelector"] == service["nodeSelector"]
    assert kept["gcu-stack:name"] == NAME and kept["gcu-stack:driverUpgrade"] == config["gcu-stack:driverUpgrade"]
    assert blueprints.keeping_only({"gcu-stack:spec": json.dumps(document["spec"]), "gcu-stack:name": NAME},
                                   "upgradeManager", PROJECT_DIR, frozenset()) is None


@pytest.mark.parametrize("op, urn, disturbs", [
    ("same", "urn:pulumi:s::p::gcu:stack:GcuResource$gcu:components:UpgradeManager$kubernetes:apps/v1:Deployment::um", False),
    ("update", "urn:pulumi:s::p::gcu:stack:GcuResource$gcu:components:UpgradeManager$kubernetes:apps/v1:Deployment::um", True),
    ("delete", "urn:pulumi:s::p::gcu:stack:GcuResource$gcu:components:Exporter$kubernetes:apps/v1:DaemonSet::exp", False),
    ("delete", "urn:pulumi:s::p::gcu:stack:GcuResource$kubernetes:core/v1:Namespace::enflame", True),
    ("update", "urn:pulumi:s::p::gcu:stack:GcuResource$kubernetes:core/v1:Namespace::enflame", False),
    ("replace", "urn:pulumi:s::p::pulumi:providers:kubernetes::cluster", True),
    ("delete", "urn:pulumi:s::p::gcu:stack:GcuResource$pulumi:providers:pulumi-python::gcu-hoststate", False),
])
def test_what_disturbs_the_service_while_it_deletes_the_rest(op, urn, disturbs):
    assert disturbs_the_service(op, urn) is disturbs


def test_openapi_and_metrics(served):
    service, _, _ = served
    status, document = service.curl("/openapi.json", token=None)
    assert status == 200
    for path in ("/gum/v1/gr", "/gum/v1/gr/{name}", "/gum/v1/gr/{name}/resource/{kind}", "/gum/v1/gr/{name}/preview",
                 "/gum/v1/gr/{name}/history", "/gum/v1/operations/{operation_id}", "/metrics"):
        assert path in document["paths"], path
    assert document["paths"]["/gum/v1/gr/{name}"]["put"]["requestBody"]["content"]["application/json"]["schema"]["required"] == ["file"]
    service.curl("/gum/v1/gr")
    done = subprocess.run(["curl", "-sS", "-H", f"Authorization: Bearer {TOKEN}", service.url + "/metrics"],
                          capture_output=True, text=True, timeout=30)
    assert 'gcu_stack_service_requests_total{operation="List",status="200"}' in done.stdout, done.stdout[:2000]


def test_driver_metrics_count_the_reports_of_the_rollouts_an_operation_ran_pools_included():
    from service.metrics import Metrics

    metrics = Metrics()
    report = {"result": "upgraded", "seconds": 12.0, "evicted": ["default/job-1"]}
    output = {"reports": {"n1": report}, "pools": {"a": {"reports": {"n2": report, "n3": {**report, "evicted": []}}},
                                                    "b": {"reports": {"n4": report}}}}
    # Pool a's rollout ran, the component's own and pool b's did not: their reports are an earlier run's.
    metrics.driver_reports(output, ["driver-upgrade-a"])
    sample = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in metrics.registry.collect() for s in m.samples}
    assert sample[("gcu_stack_service_driver_node_upgrade_seconds_count", (("result", "upgraded"),))] == 2
    assert sample[("gcu_stack_service_driver_evictions_total", ())] == 1


def test_a_restart_reports_the_operation_it_cut_short_and_takes_the_next(tmp_path):
    """The service killed in the middle of a PUT, its whole process tree at once (a pod's restart): on its next start
    the operation is reported failed, saying why, not lost; the next PUT is taken (the dead run's locks cleared), not
    refused as if the dead run still held the stack."""
    _, env = new_stack(tmp_path, NAME)
    env = {**os.environ, **env}
    project = tmp_path / "project"
    with running_service(tmp_path / "svc", project, env, own_group=True) as service:
        write_blueprint(service, "gr.json")
        status, body = service.curl(f"/gum/v1/gr/{NAME}", data='{"file": "gr.json"}', method="PUT")
        assert status == 200 and body["result"] == "Success", body
        assert service.curl(f"/gum/v1/operations/{body['operationId']}")[1]["content"]["phase"] == "running"
        os.killpg(service.process.pid, signal.SIGKILL)
        service.process.wait(30)
    with running_service(tmp_path / "svc", project, env) as again:
        status, cut = again.curl(f"/gum/v1/operations/{body['operationId']}")
        assert status == 200 and cut["content"]["phase"] == "failed", cut
        assert "the service stopped while this Upgrade ran" in cut["content"]["error"], cut
        status, taken = again.curl(f"/gum/v1/gr/{NAME}", data='{"file": "gr.json"}', method="PUT")
        assert status == 200 and taken["result"] == "Success", (taken, again.tail())
        done = again.wait_for(taken["operationId"], timeout=300)
        assert "the service stopped" not in (done.get("error") or ""), done
        assert "lock" not in (done.get("error") or "").lower(), done
