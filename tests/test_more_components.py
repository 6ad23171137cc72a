"""Nightingale, GCU-share device plugin and scheduler extender, and Volcano under Pulumi mocks."""

import json

import pytest
import yaml

from harness import run_program
from k8s_schema import normalise, validate_all
from test_config import fails, seed_spec

PASSWORD = "s3cr3t-Db-pa55"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
RELEASE = "kubernetes:helm.sh/v3:Release"


def full_spec(**changes):
    """The seed with Nightingale, GCU-share (device plugin off) and Volcano turned on."""
    base = {
        "nightingale.notDeploy": False,
        "gcusharePlugin.notDeploy": False,
        "gcushareScheduler.notDeploy": False,
        "devicePlugin.notDeploy": True,
        "volcano.notDeploy": False,
    }
    return seed_spec(**{**base, **changes})


def run_full(spec=None, **config):
    return run_program(
        {"spec": spec or full_spec(), "nightingaleDbPassword": PASSWORD, **config},
        secret_keys=("nightingaleDbPassword",),
    )


@pytest.fixture(scope="module")
def full():
    return run_full()


def pod(registration):
    return registration.inputs["spec"]["template"]["spec"]


def test_every_component_is_counted(full):
    assert full.outputs["readyResource"] == "8/8"
    names = [s["name"] for s in full.outputs["resourceStatuses"]]
    assert names == ["nfd", "toolkit", "gcusharePlugin", "exporter", "gfd", "gcushareScheduler", "volcano", "nightingale"]
    assert full.outputs["phase"] == "Running"


def test_nightingale_objects_have_the_seed_names(full):
    deployments = {r.k8s_name for r in full.k8s() if r.inputs["kind"] == "Deployment" and r.inputs["metadata"]["namespace"] == "enflame"}
    assert deployments == {"agentd", "mysql", "nserver", "nwebapi", "prometheus", "redis"}
    services = {r.k8s_name for r in full.k8s() if r.inputs["kind"] == "Service" and r.inputs["metadata"]["namespace"] == "enflame"}
    assert services == {"mysql", "nserver", "nwebapi", "prometheus", "redis"}
    assert full.one("PersistentVolume", "mysql-pv")
    assert full.one("PersistentVolumeClaim", "mysql-pvc").inputs["spec"]["volumeName"] == "mysql-pv"
    namespace = full.one("Namespace", "enflame")
    assert namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    status = next(s for s in full.outputs["resourceStatuses"] if s["name"] == "nightingale")
    assert status["namespace"] == "enflame"
    owned = {(o["kind"], o["name"]) for o in status["ownResources"]}
    assert {("Deployment", "agentd"), ("PersistentVolume", "mysql-pv"), ("PersistentVolumeClaim", "mysql-pvc"), ("Service", "redis")} <= owned


def test_nightingale_web_ui_node_port_is_configurable():
    run = run_full(nightingaleWebNodePort=31080)
    service = normalise(run.one("Service", "nwebapi").inputs)
    assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["nodePort"] == 31080
    assert normalise(run.one("Service", "mysql").inputs)["spec"]["type"] == "ClusterIP"


def test_prometheus_scrapes_the_gcu_exporter(full):
    config = yaml.safe_load(full.one("ConfigMap", "nightingale-config").inputs["data"]["prometheus.yml"])
    targets = [t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    assert "enflame-gcu-exporter.kube-system.svc:9400" in targets
    assert "/etc/prometheus" in [m["mountPath"] for m in pod(full.one("Deployment", "prometheus"))["containers"][0]["volumeMounts"]]


def test_nightingale_waits_for_the_exporter(full):
    exporter = full.one("DaemonSet", "enflame-gcu-exporter").urn
    for name in ("agentd", "mysql", "nserver", "nwebapi", "prometheus", "redis"):
        assert exporter in full.one("Deployment", name).dependencies


def test_readiness_probes_on_nightingale_services(full):
    for name in ("mysql", "nserver", "nwebapi", "prometheus", "redis"):
        assert "readinessProbe" in pod(full.one("Deployment", name))["containers"][0]


def test_deployments_count_as_available_only_with_a_ready_pod(full):
    # One replica: the rollout may never drop below it, or `pulumi up` would return before it serves.
    for name in ("agentd", "nserver", "nwebapi", "prometheus", "redis", "gcushare-scheduler-extender"):
        strategy = normalise(full.one("Deployment", name).inputs["spec"]["strategy"])
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    # MySQL owns a ReadWriteOnce volume: the old pod goes before the new one starts.
    assert full.one("Deployment", "mysql").inputs["spec"]["strategy"] == {"type": "Recreate"}


def test_the_password_is_never_plain_text(full):
    secret = full.one("Secret", "nightingale-db")
    data = secret.inputs["stringData"]
    assert data["4dabf18193072939515e22adb298388d"] == SECRET_SIG  # reaches the engine as a Pulumi secret
    assert data["value"] == {"password": PASSWORD}
    mysql_env = pod(full.one("Deployment", "mysql"))["containers"][0]["env"]
    assert {"name": "MYSQL_ROOT_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "nightingale-db", "key": "password"}}} in mysql_env

    def plain(value):
        """Every string reachable without passing through a secret wrapper."""
        if isinstance(value, dict):
            if value.get("4dabf18193072939515e22adb298388d") == SECRET_SIG:
                return
            for v in value.values():
                yield from plain(v)
        elif isinstance(value, list):
            for v in value:
                yield from plain(v)
        elif isinstance(value, str):
            yield value

    for registration in full.registrations:
        assert not [s for s in plain(registration.inputs) if PASSWORD in s], registration.urn
    assert PASSWORD not in json.dumps(full.outputs)


def test_missing_password_names_the_config_key():
    fails({"spec": full_spec()}, "gcu-stack:nightingaleDbPassword: required", "pulumi config set --secret gcu-stack:nightingaleDbPassword")


def test_plain_text_password_is_refused():
    fails({"spec": full_spec(), "nightingaleDbPassword": PASSWORD}, "gcu-stack:nightingaleDbPassword: is stored in plain text")


def test_nightingale_sub_parts_take_their_base_fields():
    spec = full_spec(
        **{
            "nightingale.mysql-deploy": {"image": "mysql", "version": "8.0.36", "repository": "hub.local/db"},
            "nightingale.redis-deploy": {"name": "cache", "imagePullPolicy": "Always"},
            "nightingale.mysql-pv": {"name": "n9e-mysql-pv", "hostpath": "/data/n9e/mysql"},
            "nightingale.mysql-pvc": {"name": "n9e-mysql-pvc"},
        }
    )
    run = run_full(spec)
    assert pod(run.one("Deployment", "mysql"))["containers"][0]["image"] == "hub.local/db/mysql:8.0.36"
    redis = pod(run.one("Deployment", "cache"))["containers"][0]
    assert redis["imagePullPolicy"] == "Always"
    assert run.one("Service", "cache")
    assert "REDIS_ADDR" in {e["name"] for e in redis["env"]}
    assert {e["name"]: e.get("value") for e in redis["env"]}["REDIS_ADDR"] == "cache:6379"
    assert run.one("PersistentVolume", "n9e-mysql-pv").inputs["spec"]["hostPath"]["path"] == "/data/n9e/mysql"
    assert run.one("PersistentVolumeClaim", "n9e-mysql-pvc").inputs["spec"]["volumeName"] == "n9e-mysql-pv"
    claim = pod(run.one("Deployment", "mysql"))["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "n9e-mysql-pvc"}} in claim
    validate_all(run)


def test_nightingale_first_level_wins_over_sub_parts_as_in_gcu_operator():
    spec = full_spec(**{"nightingale.namespace": "monitoring", "nightingale.version": "5.9", "nightingale.agentd-deploy": {"version": "6.0", "namespace": "elsewhere"}})
    run = run_full(spec)
    agentd = run.one("Deployment", "agentd")
    assert agentd.inputs["metadata"]["namespace"] == "monitoring"
    assert pod(agentd)["containers"][0]["image"].endswith("/agentd:5.9")


def test_gcushare_plugin_gets_memory_unit_and_takes_the_device_plugin_place(full):
    ds = full.one("DaemonSet", "gcushare-device-plugin")
    container = pod(ds)["containers"][0]
    assert "--memory-unit=1" in container["args"]
    assert "kubernetes.io/hostname" not in json.dumps(pod(ds).get("affinity", {}))
    runtime = full.of_type("pulumi-python:dynamic/gcu:DockerRuntime")[0].urn
    assert runtime in ds.dependencies
    assert ds.urn in full.one("DaemonSet", "enflame-gcu-exporter").dependencies
    assert not [r for r in full.k8s() if r.k8s_name == "enflame-gcu-k8s-plugin"]


def test_gcushare_nodes_limit_the_plugin():
    run = run_full(full_spec(**{"gcusharePlugin.gcushareNodes": ["gcu-node-1", "gcu-node-3"], "gcusharePlugin.memoryUnit": "0.01"}))
    spec = pod(run.one("DaemonSet", "gcushare-device-plugin"))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gcu-node-1", "gcu-node-3"]} in terms["matchExpressions"]
    assert "--memory-unit=0.01" in spec["containers"][0]["args"]


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


def test_volcano_is_the_official_chart_with_spec_images(full):
    (release,) = full.of_type(RELEASE)
    inputs = release.inputs
    assert inputs["chart"] == "volcano" and inputs["version"] == "1.9.0"
    assert inputs["repositoryOpts"]["repo"] == "https://volcano-sh.github.io/helm-charts"
    assert inputs["namespace"] == "volcano-system"
    assert inputs["createNamespace"] is False
    basic = inputs["values"]["basic"]
    assert basic["image_registry"] == "artifact.enflame.cn"
    assert basic["controller_image_name"] == "enflame_docker_images/enflame/vc-controller-manager"
    assert basic["scheduler_image_name"] == "enflame_docker_images/enflame/vc-scheduler"
    assert basic["admission_image_name"] == "enflame_docker_images/enflame/vc-webhook-manager"
    assert full.one("Namespace", "volcano-system").inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_volcano_from_a_local_chart_archive(tmp_path):
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "volcano-1.9.0.tgz").write_bytes(b"stand-in archive")
    spec = full_spec(**{"volcano.repository": "mirror.local:5000/volcanosh", "volcano.version": "v1.9.0"})
    run = run_program(
        {"spec": spec, "nightingaleDbPassword": PASSWORD, "volcanoChart": {"path": "charts/volcano-1.9.0.tgz"}},
        secret_keys=("nightingaleDbPassword",),
        project_dir=tmp_path,
    )
    (release,) = run.of_type(RELEASE)
    assert release.inputs["chart"] == str(tmp_path / "charts" / "volcano-1.9.0.tgz")
    assert "repositoryOpts" not in release.inputs
    basic = release.inputs["values"]["basic"]
    assert (basic["image_registry"], basic["image_tag_version"]) == ("mirror.local:5000", "v1.9.0")
    assert basic["scheduler_image_name"] == "volcanosh/vc-scheduler"


def test_volcano_parts_that_the_chart_cannot_express_are_an_error():
    spec = full_spec(**{"volcano.scheduler": {"version": "v1.10.0"}, "volcano.controller": {"version": "v1.9.0"}})
    fails({"spec": spec, "nightingaleDbPassword": PASSWORD}, "spec.volcano: the Volcano chart needs one version")


def test_missing_local_chart_archive_is_an_error():
    fails({"spec": full_spec(), "volcanoChart": {"path": "charts/nope.tgz"}}, "gcu-stack:volcanoChart.path: chart archive")


def test_node_port_clash_is_an_error():
    fails({"spec": full_spec(), "nightingaleWebNodePort": 30940}, "node port 30940 is already used by spec.exporter")


def test_every_object_is_valid_kubernetes(full):
    assert validate_all(full) > 30
