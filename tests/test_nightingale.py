"""Nightingale (components/catalog/nightingale.py)."""

import json

import yaml
from harness import PASSWORD, fails, full_spec, pod_spec, run_full
from k8s_schema import normalise, validate_all

from devtools import promconfig

SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


def test_nightingale_objects_have_the_seed_names(full):
    deployments = {r.k8s_name for r in full.k8s() if r.inputs["kind"] == "Deployment" and r.inputs["metadata"]["namespace"] == "enflame"}
    assert deployments == {"agentd", "mysql", "nserver", "nwebapi", "prometheus", "redis"}
    services = {r.k8s_name for r in full.k8s() if r.inputs["kind"] == "Service" and r.inputs["metadata"]["namespace"] == "enflame"}
    assert services == {"mysql", "nserver", "nwebapi", "prometheus", "redis"}
    assert full.one("PersistentVolume", "mysql-pv")
    assert full.one("PersistentVolumeClaim", "mysql-pvc").inputs["spec"]["volumeName"] == "mysql-pv"
    namespace = full.one("Namespace", "enflame")
    # mysql's claim is handed to its non-root user by a root init container: "baseline" (see the test below).
    assert namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    status = next(s for s in full.outputs["resourceStatuses"] if s["name"] == "nightingale")
    assert status["namespace"] == "enflame"
    owned = {(o["kind"], o["name"]) for o in status["ownResources"]}
    assert {("Deployment", "agentd"), ("PersistentVolume", "mysql-pv"), ("PersistentVolumeClaim", "mysql-pvc"), ("Service", "redis")} <= owned


def test_nightingale_web_ui_node_port_is_configurable():
    run = run_full(nightingaleWebNodePort=31080)
    service = normalise(run.one("Service", "nwebapi").inputs)
    assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["nodePort"] == 31080
    assert normalise(run.one("Service", "mysql").inputs)["spec"]["type"] == "ClusterIP"


def test_the_database_volume_is_handed_to_its_user_and_prometheus_writes_to_an_empty_dir(full):
    # The PV is a hostPath: the kubelet creates its directory root-owned and fsGroup never reaches it.
    mysql = pod_spec(full.one("Deployment", "mysql"))
    (owner,) = mysql["initContainers"]
    assert owner["image"] == mysql["containers"][0]["image"]
    assert owner["volumeMounts"] == [{"name": "data", "mountPath": "/var/lib/mysql"}]
    assert "chown -R 1000:1000 /var/lib/mysql" in owner["command"][-1]
    assert owner["securityContext"]["runAsUser"] == 0
    assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]}
    assert mysql["containers"][0]["securityContext"]["runAsNonRoot"] is True
    prometheus = pod_spec(full.one("Deployment", "prometheus"))
    assert {"name": "prometheus-scratch", "emptyDir": {}} in prometheus["volumes"]
    assert {"name": "prometheus-scratch", "mountPath": "/prometheus"} in prometheus["containers"][0]["volumeMounts"]
    for name in ("agentd", "redis", "nserver", "nwebapi", "prometheus"):
        assert "initContainers" not in pod_spec(full.one("Deployment", name))


def test_prometheus_scrapes_the_gcu_exporter(full):
    config = yaml.safe_load(full.one("ConfigMap", "nightingale-config").inputs["data"]["prometheus.yml"])
    targets = [t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    assert "enflame-gcu-exporter.kube-system.svc:9400" in targets
    assert "/etc/prometheus" in [m["mountPath"] for m in pod_spec(full.one("Deployment", "prometheus"))["containers"][0]["volumeMounts"]]


def test_prometheus_loads_the_rendered_configuration(full, tmp_path):
    """Read by Prometheus' own loader (devtools/promconfig), as `prometheus --config.file` reads it."""
    rendered = full.one("ConfigMap", "nightingale-config").inputs["data"]["prometheus.yml"]
    (tmp_path / "prometheus.yml").write_text(rendered)
    loaded = promconfig.check(tmp_path / "prometheus.yml")
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    assert "gcu-exporter=/metrics" in loaded.stdout and "prometheus=/metrics" in loaded.stdout, loaded.stdout
    # The same loader refuses what Prometheus would.
    (tmp_path / "bad.yml").write_text(rendered.replace("scrape_interval: 30s", "scrape_interval: 30 seconds"))
    refused = promconfig.check(tmp_path / "bad.yml")
    assert refused.returncode == 1 and "30 seconds" in refused.stdout, refused.stdout


def test_nightingale_waits_for_the_exporter(full):
    exporter = full.one("DaemonSet", "enflame-gcu-exporter").urn
    for name in ("agentd", "mysql", "nserver", "nwebapi", "prometheus", "redis"):
        assert exporter in full.one("Deployment", name).dependencies


def test_readiness_probes_on_nightingale_services(full):
    for name in ("mysql", "nserver", "nwebapi", "prometheus", "redis"):
        assert "readinessProbe" in pod_spec(full.one("Deployment", name))["containers"][0]


def test_the_password_is_never_plain_text(full):
    secret = full.one("Secret", "nightingale-db")
    data = secret.inputs["stringData"]
    assert data["4dabf18193072939515e22adb298388d"] == SECRET_SIG  # reaches the engine as a Pulumi secret
    assert data["value"] == {"password": PASSWORD}
    mysql_env = pod_spec(full.one("Deployment", "mysql"))["containers"][0]["env"]
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
    assert pod_spec(run.one("Deployment", "mysql"))["containers"][0]["image"] == "hub.local/db/mysql:8.0.36"
    redis = pod_spec(run.one("Deployment", "cache"))["containers"][0]
    assert redis["imagePullPolicy"] == "Always"
    assert run.one("Service", "cache")
    assert "REDIS_ADDR" in {e["name"] for e in redis["env"]}
    assert {e["name"]: e.get("value") for e in redis["env"]}["REDIS_ADDR"] == "cache:6379"
    assert run.one("PersistentVolume", "n9e-mysql-pv").inputs["spec"]["hostPath"]["path"] == "/data/n9e/mysql"
    assert run.one("PersistentVolumeClaim", "n9e-mysql-pvc").inputs["spec"]["volumeName"] == "n9e-mysql-pv"
    claim = pod_spec(run.one("Deployment", "mysql"))["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "n9e-mysql-pvc"}} in claim
    validate_all(run)


def test_nightingale_first_level_wins_over_sub_parts_as_in_gcu_operator():
    spec = full_spec(**{"nightingale.namespace": "monitoring", "nightingale.version": "5.9", "nightingale.agentd-deploy": {"version": "6.0", "namespace": "elsewhere"}})
    run = run_full(spec)
    agentd = run.one("Deployment", "agentd")
    assert agentd.inputs["metadata"]["namespace"] == "monitoring"
    assert pod_spec(agentd)["containers"][0]["image"].endswith("/agentd:5.9")


def test_node_port_clash_is_an_error():
    fails({"spec": full_spec(), "nightingaleWebNodePort": 30940}, "node port 30940 is already used by spec.exporter")
