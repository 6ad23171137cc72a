"""The toolkit's runtime-activation step (components/steps/runtime_activation.py) under mocks."""

from harness import DOCKER_RUNTIME, GCU_NODES, SEED_BLUEPRINT, ClusterMocks, run_program




def test_node_selection_and_docker_settings_come_from_stack_config():
    run = run_program(
        {
            "blueprint": str(SEED_BLUEPRINT),
            "gcuNodes": {"names": ["a", "b"], "driverLabel": "", "pageSize": 100},
            "dockerRuntime": {"mode": "restart", "transport": "local", "daemonJson": "/srv/docker/daemon.json"},
        }
    )
    nodes = run.single(GCU_NODES).inputs
    assert nodes["names"] == ["a", "b"] and nodes.get("driverLabel") is None and nodes["pageSize"] == 100
    runtime = run.single(DOCKER_RUNTIME).inputs
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
