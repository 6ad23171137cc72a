"""The driver (components/catalog/driver.py)."""

from harness import GCU_REPO, pod_spec, run_program, seed_spec
from k8s_schema import validate_all


def test_driver_on_is_privileged_with_env_from_spec():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    pod = pod_spec(run.one("DaemonSet", "enflame-gcu-driver"))
    (container,) = pod["containers"]
    assert container["image"] == f"{GCU_REPO}/gcu-driver:latest"
    assert container["securityContext"]["privileged"] is True
    assert {"name": "WITH_REBOOT", "value": "false"} in container["env"]
    assert pod["hostPID"] is True
    assert "/lib/modules" in {v["hostPath"]["path"] for v in pod["volumes"]}
    assert run.outputs["readyResource"] == "6/6"
    validate_all(run)
