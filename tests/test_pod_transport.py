"""The transports (components/providers/transports.py): the runtime pod each runtime gets, and how its answer is read."""

import kubernetes_validate
import pytest
from k8s_schema import KUBERNETES_VERSION

from components.node import NODE_CODE_DIR
from components.providers.transports import LocalTransport, PodTransport, parse_result, transport_for
from components.steps.runtime_activation import ContainerdOptions, DockerRuntimeOptions

PROPS = {
    "docker": {**DockerRuntimeOptions().model_dump(by_alias=True), "pidFile": "/run/docker.pid"},
    "containerd": ContainerdOptions().model_dump(by_alias=True),
    "podImage": "registry.local/gcu/gcu-runtime:1.0",
    "podNamespace": "kube-system",
    "timeoutSeconds": 120,
}


def argument(command: list, flag: str) -> str:
    return command[command.index(flag) + 1]


def assert_runs(container: dict, script: str, action: str, arguments: dict) -> None:
    """The container runs `script` (node code) with `action`, each flag of `arguments` followed by its value."""
    command = container["command"]
    assert command[:3] == ["python3", f"{NODE_CODE_DIR}/{script}", action]
    assert {flag: argument(command, flag) for flag in arguments} == arguments


def runtime_pod(runtime: str, action: str, node: str, state) -> dict:
    """The pod that runs `action` on `node` for `runtime`, valid for the Kubernetes API."""
    transport = transport_for(PROPS, runtime)
    pod = transport.pod_manifest(node, transport.backend.arguments(action, node, state))
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    return pod


def test_one_host_per_node():
    assert PodTransport.hosts(["b", "a"]) == {"a": ["a"], "b": ["b"]}


def test_docker_pod_is_pinned_privileged_and_mounts_what_the_command_uses():
    spec = runtime_pod("docker", "activate", "gcu-node-7", None)["spec"]
    assert spec["nodeName"] == "gcu-node-7" and spec["hostPID"] is True and spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["image"] == PROPS["podImage"]
    assert_runs(container, "runtime_host.py", "activate", {
        "--daemon-json": "/host/etc/docker/daemon.json",
        "--docker-host": "unix:///host/var/run/docker.sock",
        "--pid-file": "/host/run/docker.pid",
        "--restart-command": "nsenter -t 1 -m -u -i -n -p -- systemctl restart docker",
        "--runtime-path": "/usr/local/enflame/bin/enflame-container-runtime",
    })
    mounted = {v["hostPath"]["path"] for v in spec["volumes"]}
    assert mounted == {"/etc/docker", "/var/run", "/run"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/host/etc/docker", "/host/var/run", "/host/run"}


def test_containerd_pod_runs_the_containerd_module_with_host_paths_under_host_root():
    pod = runtime_pod("containerd", "restore", "gcu-node-8", {"written": None})
    (container,) = pod["spec"]["containers"]
    # containerd_host keeps host paths in its arguments and files, and reads them under --host-root.
    assert_runs(container, "containerd_host.py", "restore", {
        "--config-toml": "/etc/containerd/config.toml",
        "--host-root": "/host",
        "--restart-command": "nsenter -t 1 -m -u -i -n -p -- systemctl restart containerd",
        "--state-json": '{"written": null}',
    })
    # Mounts follow the runtime actually used: containerd's config directory and socket, nothing of docker's.
    assert {v["hostPath"]["path"] for v in pod["spec"]["volumes"]} == {"/etc/containerd", "/run/containerd"}


def test_set_default_off_reaches_the_node():
    props = {**PROPS, "containerd": {**PROPS["containerd"], "setDefaultRuntime": False}}
    transport = transport_for(props, "containerd")
    assert "--no-default" in transport.backend.arguments("activate", "n", None)


def test_local_transport_is_one_host_per_runtime():
    local = {**PROPS, "docker": {**PROPS["docker"], "transport": "local"}, "containerd": {**PROPS["containerd"], "transport": "local"}}
    docker, containerd = transport_for(local, "docker"), transport_for(local, "containerd")
    assert isinstance(docker, LocalTransport) and isinstance(containerd, LocalTransport)
    # "local" is the key an earlier release recorded for docker: kept, so its state still matches.
    assert docker.hosts(["b", "a"]) == {"local": ["a", "b"]}
    assert containerd.hosts(["c"]) == {"local-containerd": ["c"]}
    assert docker.hosts([]) == {}


def test_result_is_the_last_json_line_and_errors_name_the_node():
    assert parse_result("n", "starting\n{\"active\": true}\n") == {"active": True}
    with pytest.raises(RuntimeError, match="node n: /etc/docker/daemon.json is not valid JSON"):
        parse_result("n", '{"error": "node n: /etc/docker/daemon.json is not valid JSON (line 1)"}')
    with pytest.raises(RuntimeError, match="printed no result"):
        parse_result("n", "Traceback ...\n")


class ScriptedPods(PodTransport):
    """The pods' logs in turn, as a node whose runtime restarts under the first ones would give them."""

    def __init__(self, logs: list[str]):
        super().__init__(transport_for(PROPS, "containerd").backend, transport_for(PROPS, "containerd").pod)
        self.logs, self.runs = list(logs), 0

    def _run_once(self, node: str, argv: list[str]) -> str:
        self.runs += 1
        return self.logs.pop(0)


def test_a_pod_killed_before_its_result_runs_again_and_an_error_result_does_not():
    pods = ScriptedPods(["", "starting\n", '{"active": true}'])
    assert pods.activate("gcu-node-1", ["gcu-node-1"]) == {"active": True} and pods.runs == 3
    pods = ScriptedPods(['{"error": "node gcu-node-1: config.toml is not valid TOML"}', '{"active": true}'])
    with pytest.raises(RuntimeError, match="not valid TOML"):
        pods.activate("gcu-node-1", ["gcu-node-1"])
    assert pods.runs == 1
    pods = ScriptedPods(["", "", "Traceback ...\n", '{"active": true}'])
    with pytest.raises(RuntimeError, match="printed no result in 3 runs") as raised:
        pods.activate("gcu-node-1", ["gcu-node-1"])
    assert "Traceback" in str(raised.value) and pods.runs == 3
