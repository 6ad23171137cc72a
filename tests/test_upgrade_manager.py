"""gcu-upgrade-manager in the cluster (components/catalog/upgrade_manager.py): what the stack declares for it."""

from harness import fails, pod_spec, run_program
from k8s_schema import normalise

from components.catalog.upgrade_manager import GUM_DIR, RULES
from components.settings import DEFAULT_RESOURCE_NAME

NODE = {"kubernetes.io/hostname": "gcu-node-1"}


def declared(**settings):
    return run_program({"spec": {"upgradeManager": {"nodeSelector": NODE}}, **settings})


def test_the_service_on_its_node_behind_gums_node_port_with_its_secret_and_directories():
    run = declared(upgradeManagerStacksDir="/srv/gcu-stack")
    deployment = run.one("Deployment", "gcu-upgrade-manager")
    assert deployment.inputs["metadata"]["namespace"] == "kube-system"
    assert deployment.inputs["spec"]["strategy"] == {"type": "Recreate"}
    pod = pod_spec(deployment)
    assert pod["nodeSelector"] == NODE
    assert pod["serviceAccountName"] == "gcu-upgrade-manager"
    (container,) = pod["containers"]
    assert container["args"] == [
        "--listen=0.0.0.0:32765", "--token-file=/etc/gcu-upgrade-manager/token",
        f"--blueprints={GUM_DIR}/blueprints", f"--oplog={GUM_DIR}/op-log",
        "--config-dir=/srv/gcu-stack", "--state-dir=/srv/gcu-stack/.state",
        # The GcuResource's stack: the one the service must not replace or delete from inside.
        f"--own-stack={DEFAULT_RESOURCE_NAME}",
    ]
    env = {e["name"]: e.get("value") or e.get("valueFrom") for e in container["env"]}
    assert env["PULUMI_BACKEND_URL"] == "file:///srv/gcu-stack/.state/backend"
    # The passphrase only by reference: the stack never holds it.
    assert env["PULUMI_CONFIG_PASSPHRASE"] == {"secretKeyRef": {"name": "gcu-upgrade-manager", "key": "passphrase"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["secret"]["secret"]["secretName"] == "gcu-upgrade-manager"
    assert volumes["stacks"]["hostPath"] == {"path": "/srv/gcu-stack", "type": "DirectoryOrCreate"}
    assert volumes["blueprints"]["hostPath"]["path"] == f"{GUM_DIR}/blueprints"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["stacks"] == {"name": "stacks", "mountPath": "/srv/gcu-stack", "readOnly": False}
    assert mounts["blueprints"]["readOnly"] is True and mounts["op-log"]["readOnly"] is False
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 32765}
    service = normalise(run.one("Service", "gcu-upgrade-manager").inputs)
    assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["nodePort"] == 32765
    assert run.one("ClusterRole", "gcu-upgrade-manager").inputs["rules"] == [dict(r) for r in RULES]
    assert run.outputs["upgradeManager"] == {
        "service": "gcu-upgrade-manager.kube-system", "nodePort": 32765, "nodeSelector": NODE,
        "backend": "file:///srv/gcu-stack/.state/backend", "blueprints": f"{GUM_DIR}/blueprints",
    }


def test_a_backend_url_and_another_node_port():
    run = declared(upgradeManagerBackendUrl="s3://bucket/gcu", upgradeManagerNodePort=31765)
    (container,) = pod_spec(run.one("Deployment", "gcu-upgrade-manager"))["containers"]
    assert {"name": "PULUMI_BACKEND_URL", "value": "s3://bucket/gcu"} in container["env"]
    service = normalise(run.one("Service", "gcu-upgrade-manager").inputs)
    assert service["spec"]["ports"][0]["nodePort"] == 31765
    assert "envFrom" not in container


def test_the_backend_urls_credentials_from_the_operators_secret():
    run = declared(upgradeManagerBackendUrl="s3://bucket/gcu", upgradeManagerBackendSecret="gcu-backend")
    (container,) = pod_spec(run.one("Deployment", "gcu-upgrade-manager"))["containers"]
    # By reference only: the stack never holds the credentials.
    assert container["envFrom"] == [{"secretRef": {"name": "gcu-backend"}}]
    assert not [e for e in container["env"] if e["name"].startswith("AWS_")]


def test_the_stacks_directory_on_the_operators_claim_at_the_same_path():
    run = declared(upgradeManagerStacksDir="/srv/gcu-stack", upgradeManagerStateClaim="gcu-stack-state")
    pod = pod_spec(run.one("Deployment", "gcu-upgrade-manager"))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["stacks"] == {"name": "stacks", "persistentVolumeClaim": {"claimName": "gcu-stack-state"}}
    (container,) = pod["containers"]
    assert {"name": "stacks", "mountPath": "/srv/gcu-stack", "readOnly": False} in container["volumeMounts"]
    assert {"name": "PULUMI_BACKEND_URL", "value": "file:///srv/gcu-stack/.state/backend"} in container["env"]
    assert run.outputs["upgradeManager"]["stateClaim"] == "gcu-stack-state"


def test_https_with_the_operators_certificate():
    run = declared(upgradeManagerTlsSecret="gcu-upgrade-manager-tls")
    pod = pod_spec(run.one("Deployment", "gcu-upgrade-manager"))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "gcu-upgrade-manager-tls", "defaultMode": 0o400}
    (container,) = pod["containers"]
    assert {"name": "tls", "mountPath": "/etc/gcu-upgrade-manager-tls", "readOnly": True} in container["volumeMounts"]
    assert container["args"][-2:] == ["--tls-cert=/etc/gcu-upgrade-manager-tls/tls.crt",
                                      "--tls-key=/etc/gcu-upgrade-manager-tls/tls.key"]
    # The kubelet probes it over HTTPS (without checking the certificate, as kubelets do).
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 32765, "scheme": "HTTPS"}
    assert run.outputs["upgradeManager"]["tlsSecret"] == "gcu-upgrade-manager-tls"


def test_backend_credentials_without_a_backend_url_are_refused():
    fails({"spec": {"upgradeManager": {"nodeSelector": NODE}}, "upgradeManagerBackendSecret": "gcu-backend"},
          "gcu-stack:upgradeManagerBackendSecret: the credentials of a backend URL")


def test_the_rules_grant_no_wildcard_and_cover_every_kind_a_full_stack_declares():
    from harness import run_full

    granted = {(group, resource) for rule in RULES for group in rule["apiGroups"] for resource in rule["resources"]
               if {"create", "patch", "delete"} <= set(rule["verbs"])}
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in RULES)
    for registration in run_full().k8s():
        group = registration.inputs["apiVersion"].rpartition("/")[0]
        resource = registration.inputs["kind"].lower() + ("es" if registration.inputs["kind"].endswith("s") else "s")
        if resource.endswith("ys"):
            resource = resource[:-2] + "ies"
        assert (group, resource) in granted, f"{registration.inputs['kind']} ({group or 'core'}) is not granted"


def test_without_a_node_the_service_is_refused_before_anything_is_declared():
    fails({"spec": {"upgradeManager": {}}}, "spec.upgradeManager.nodeSelector: required")
