"""The toolkit's runtime-activation step (components/steps/runtime_activation.py) under mocks."""

import pytest
from harness import CONTAINER_RUNTIME, GCU_NODES, SEED_BLUEPRINT, ClusterMocks, pod_spec, run_program
from k8s_schema import validate_all

TOOLKIT = "enflame-gcu-docker-plugin"


def toolkit_env(run) -> dict:
    return {e["name"]: e.get("value") for e in pod_spec(run.one("DaemonSet", TOOLKIT))["containers"][0]["env"]}


def mounted(run) -> set:
    return {v["hostPath"]["path"] for v in pod_spec(run.one("DaemonSet", TOOLKIT))["volumes"]}


def test_node_selection_and_docker_settings_come_from_stack_config():
    run = run_program(
        {
            "blueprint": str(SEED_BLUEPRINT),
            "gcuNodes": {"names": ["a", "b"], "driverLabel": "", "pageSize": 100},
            "dockerRuntime": {"mode": "restart", "transport": "local", "daemonJson": "/srv/docker/daemon.json"},
            "containerRuntime": "docker",
        }
    )
    nodes = run.single(GCU_NODES).inputs
    assert nodes["names"] == ["a", "b"] and nodes.get("driverLabel") is None and nodes["pageSize"] == 100
    runtime = run.single(CONTAINER_RUNTIME).inputs
    assert runtime["runtime"] == "docker"
    docker = runtime["docker"]
    assert (docker["mode"], docker["transport"], docker["daemonJson"]) == ("restart", "local", "/srv/docker/daemon.json")
    env = toolkit_env(run)
    # Nodes that join later activate themselves with the same settings.
    assert env["CONTAINER_RUNTIME"] == "docker"
    assert env["RUNTIME_ACTIVATION"] == "restart"
    assert env["DAEMON_JSON"] == "/host/srv/docker/daemon.json"
    assert env["DOCKER_HOST"] == "unix:///host/var/run/docker.sock"
    # The host's init restarts docker, not the container.
    assert env["DOCKER_RESTART_COMMAND"].startswith("nsenter -t 1 -m -u -i -n -p -- systemctl restart docker")
    assert "CONTAINERD_CONFIG" not in env
    # Exactly the directories of the configured paths are mounted, where the env says.
    assert {"/srv/docker", "/var/run"} <= mounted(run) and "/etc/docker" not in mounted(run)
    assert "/etc/containerd" not in mounted(run)
    mount_paths = {m["mountPath"] for m in pod_spec(run.one("DaemonSet", TOOLKIT))["containers"][0]["volumeMounts"]}
    assert {"/host/srv/docker", "/host/var/run"} <= mount_paths
    assert env["ENFLAME_RUNTIME_PATH"] == "/usr/local/enflame/bin/enflame-container-runtime"


def test_containerd_settings_reach_the_resource_and_the_toolkit():
    run = run_program(
        {
            "blueprint": str(SEED_BLUEPRINT),
            "containerRuntime": "containerd",
            "containerd": {"configToml": "/srv/containerd/config.toml", "dropin": "/srv/containerd/conf.d/99-enflame.toml",
                           "setDefaultRuntime": False, "restartCommand": ["systemctl", "restart", "containerd.service"]},
        }
    )
    containerd = run.single(CONTAINER_RUNTIME).inputs["containerd"]
    assert containerd["configToml"] == "/srv/containerd/config.toml" and containerd["setDefaultRuntime"] is False
    assert containerd["mode"] == "restart"  # containerd 1.x exits on SIGHUP: activation is a restart
    env = toolkit_env(run)
    assert env["CONTAINER_RUNTIME"] == "containerd"
    assert env["CONTAINERD_CONFIG"] == "/srv/containerd/config.toml" and env["HOST_ROOT"] == "/host"
    assert env["CONTAINERD_SET_DEFAULT"] == "false"
    assert env["CONTAINERD_RESTART_COMMAND"].endswith("-- systemctl restart containerd.service")
    assert "DAEMON_JSON" not in env
    # The runtime actually used decides the mounts: containerd's config and socket, not docker's.
    assert {"/srv/containerd", "/run/containerd"} <= mounted(run)
    assert not {"/etc/docker", "/var/run"} & mounted(run)


def test_auto_prepares_the_toolkit_for_both_runtimes_and_lets_it_read_its_node():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    assert run.single(CONTAINER_RUNTIME).inputs["runtime"] == "auto"
    env = toolkit_env(run)
    assert env["CONTAINER_RUNTIME"] == "auto" and "DAEMON_JSON" in env and "CONTAINERD_CONFIG" in env
    assert {"/etc/docker", "/var/run", "/etc/containerd", "/run/containerd"} <= mounted(run)
    role = run.one("ClusterRole", TOOLKIT).inputs["rules"]
    assert role == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert pod_spec(run.one("DaemonSet", TOOLKIT))["serviceAccountName"] == TOOLKIT


def test_a_runtime_class_named_enflame_is_declared_either_way():
    for runtime in ("auto", "docker", "containerd"):
        run = run_program({"blueprint": str(SEED_BLUEPRINT), "containerRuntime": runtime})
        runtime_class = run.one("RuntimeClass", "enflame")
        assert runtime_class.inputs["handler"] == "enflame"
        assert run.by_urn(runtime_class.parent).name == "toolkit"
        validate_all(run)


def test_the_resource_keeps_the_identity_of_the_earlier_docker_runtime():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    resource = run.single(CONTAINER_RUNTIME)
    assert resource.name == "container-runtime" and run.by_urn(resource.parent).name == "toolkit"
    # Declared with an alias to pulumi-python:dynamic/gcu:DockerRuntime "docker-runtime": no replacement on upgrade.
    assert any("DockerRuntime" in str(a) and "docker-runtime" in str(a) for a in resource.aliases), resource.aliases


@pytest.mark.parametrize("setting, expected", [
    ({"containerRuntime": "cri-o"}, "gcu-stack:containerRuntime: must be one of auto, docker, containerd"),
    ({"containerd": {"mode": "reload"}}, "gcu-stack:containerd.mode: must be one of restart, none"),
    ({"containerd": {"configToml": "etc/containerd/config.toml"}}, "gcu-stack:containerd.configToml"),
    ({"containerd": {"setDefault": False}}, "gcu-stack:containerd.setDefault: unknown field (did you mean setDefaultRuntime?)"),
])
def test_bad_runtime_settings_name_the_key(setting, expected):
    from harness import fails

    fails({"blueprint": str(SEED_BLUEPRINT), **setting}, expected)


def test_toolkit_is_not_running_until_the_runtime_is_active():
    mocks = ClusterMocks()
    mocks.dynamic = lambda args: {**mocks.default_dynamic(args), **({"active": False} if args.typ == CONTAINER_RUNTIME else {})}
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=mocks)
    toolkit = next(s for s in run.outputs["resourceStatuses"] if s["name"] == "toolkit")
    assert toolkit["status"] == "Deploying"
    assert run.outputs["readyResource"] == "4/5" and run.outputs["phase"] == "Deploying"


def test_mode_none_counts_the_toolkit_ready_without_activation():
    mocks = ClusterMocks()
    mocks.dynamic = lambda args: {**mocks.default_dynamic(args), **({"active": False} if args.typ == CONTAINER_RUNTIME else {})}
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "containerRuntime": "docker", "dockerRuntime": {"mode": "none"}}, mocks=mocks)
    assert run.outputs["readyResource"] == "5/5"
