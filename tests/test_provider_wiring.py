"""The bundled providers under Pulumi mocks: their inputs, outputs and place in the stack."""

import pytest

from harness import SEED_BLUEPRINT, ClusterMocks, run_program
from test_config import fails, seed_spec

GCU_NODES = "pulumi-python:dynamic/gcu:GcuNodes"
DOCKER_RUNTIME = "pulumi-python:dynamic/gcu:DockerRuntime"


def single(run, type_):
    (found,) = run.of_type(type_)
    return found


def test_seed_declares_both_provider_resources_with_readable_type_names():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    nodes = single(run, GCU_NODES)
    assert nodes.inputs["components"] == ["devicePlugin", "exporter", "gfd", "toolkit"]
    assert nodes.inputs["requireDriver"] is True  # the seed does not deploy the driver
    assert nodes.inputs["driverLabel"] == "enflame.com/gcu.driver.present=true"
    runtime = single(run, DOCKER_RUNTIME)
    assert runtime.inputs["mode"] == "reload" and runtime.inputs["transport"] == "pod"
    assert runtime.inputs["podImage"] == "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-runtime:latest"
    assert runtime.inputs["nodes"] == ["gcu-node-1", "gcu-node-2", "gcu-node-3"]
    assert "__provider" in runtime.inputs


def test_cluster_gcu_nodes_output_comes_from_the_node_resource():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=ClusterMocks(node_count=2))
    assert run.outputs["clusterGCUNodes"] == ["gcu-node-1", "gcu-node-2"]


def test_driver_deployed_means_no_pre_installed_driver_is_required():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    assert single(run, GCU_NODES).inputs["requireDriver"] is False


def test_node_selection_and_docker_settings_come_from_stack_config():
    run = run_program(
        {
            "blueprint": str(SEED_BLUEPRINT),
            "gcuNodes": {"names": ["a", "b"], "driverLabel": "", "pageSize": 100},
            "dockerRuntime": {"mode": "restart", "transport": "local", "daemonJson": "/srv/docker/daemon.json"},
        }
    )
    nodes = single(run, GCU_NODES).inputs
    assert nodes["names"] == ["a", "b"] and nodes.get("driverLabel") is None and nodes["pageSize"] == 100
    runtime = single(run, DOCKER_RUNTIME).inputs
    assert (runtime["mode"], runtime["transport"], runtime["daemonJson"]) == ("restart", "local", "/srv/docker/daemon.json")
    env = {e["name"]: e.get("value") for e in run.one("DaemonSet", "enflame-gcu-docker-plugin").inputs["spec"]["template"]["spec"]["containers"][0]["env"]}
    # Nodes that join later activate themselves with the same settings.
    assert env["RUNTIME_ACTIVATION"] == "restart"
    assert env["DAEMON_JSON"] == "/host/srv/docker/daemon.json"
    assert env["DOCKER_HOST"] == "unix:///host/var/run/docker.sock"
    # Exactly the directories of the configured paths are mounted, where the env says.
    pod = run.one("DaemonSet", "enflame-gcu-docker-plugin").inputs["spec"]["template"]["spec"]
    mounted = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert {"/srv/docker", "/var/run"} <= mounted and "/etc/docker" not in mounted
    mount_paths = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/host/srv/docker", "/host/var/run"} <= mount_paths
    assert env["ENFLAME_RUNTIME_PATH"] == "/usr/local/enflame/bin/enflame-container-runtime"


def test_toolkit_is_not_running_until_the_runtime_is_active():
    mocks = ClusterMocks()
    mocks.dynamic = lambda args: {**mocks.default_dynamic(args), **({"active": False} if args.typ == DOCKER_RUNTIME else {})}
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=mocks)
    toolkit = next(s for s in run.outputs["resourceStatuses"] if s["name"] == "toolkit")
    assert toolkit["status"] == "Deploying"
    assert run.outputs["readyResource"] == "4/5" and run.outputs["phase"] == "Deploying"


def test_mode_none_counts_the_toolkit_ready_without_activation():
    mocks = ClusterMocks()
    mocks.dynamic = lambda args: {**mocks.default_dynamic(args), **({"active": False} if args.typ == DOCKER_RUNTIME else {})}
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "dockerRuntime": {"mode": "none"}}, mocks=mocks)
    assert run.outputs["readyResource"] == "5/5"


def test_inline_kubeconfig_is_a_secret_in_provider_inputs():
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "kubeconfig": "apiVersion: v1\nkind: Config\n"})
    from pulumi.runtime.rpc import _special_sig_key, _special_secret_sig

    # It reaches the engine marked secret, so state keeps it encrypted.
    for type_ in (GCU_NODES, DOCKER_RUNTIME):
        value = single(run, type_).inputs["kubeconfig"]
        assert value[_special_sig_key] == _special_secret_sig


def test_empty_spec_declares_no_provider_resources():
    run = run_program({"spec": {}})
    assert run.of_type(GCU_NODES) == [] and run.of_type(DOCKER_RUNTIME) == []
    assert run.outputs["clusterGCUNodes"] == []


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"dockerRuntime": {"mode": "bounce"}}, "gcu-stack:dockerRuntime.mode: must be one of reload, restart, none"),
        ({"dockerRuntime": {"daemonJson": "etc/docker/daemon.json"}}, "gcu-stack:dockerRuntime.daemonJson"),
        ({"dockerRuntime": {"dockerHost": "tcp://1.2.3.4:2375"}}, "only unix:///path sockets"),
        ({"dockerRuntime": {"restartDocker": True}}, "gcu-stack:dockerRuntime.restartDocker: unknown field"),
        ({"gcuNodes": {"driverLabel": "enflame.com/driver"}}, "expected key=value"),
        ({"gcuNodes": {"nodes": ["a"]}}, "gcu-stack:gcuNodes.nodes: unknown field (did you mean names?)"),
    ],
)
def test_bad_provider_settings_name_the_setting(config, expected):
    fails({"blueprint": str(SEED_BLUEPRINT), **config}, expected)


def test_bundled_resources_use_an_explicit_provider_not_the_config_carrying_default():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    (provider,) = run.of_type("pulumi:providers:pulumi-python")
    assert provider.inputs == {}
    for type_ in (GCU_NODES, DOCKER_RUNTIME):
        assert single(run, type_).provider.startswith(provider.urn + "::")


def test_cluster_gcu_nodes_is_a_list_even_when_the_provider_reports_nothing():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=ClusterMocks(dynamic=lambda args: {}))
    assert run.outputs["clusterGCUNodes"] == []
