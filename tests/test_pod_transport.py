"""The pod transport: the activation pod it creates and how it reads the pod's answer."""

import kubernetes_validate
import pytest

from components.hoststate.transports import ENTRYPOINT, PodTransport, RuntimeSettings, parse_result, transport_for

PROPS = {
    "transport": "pod",
    "daemonJson": "/etc/docker/daemon.json",
    "dockerHost": "unix:///var/run/docker.sock",
    "pidFile": "/run/docker.pid",
    "restartCommand": ["systemctl", "restart", "docker"],
    "podImage": "registry.local/gcu/gcu-runtime:1.0",
    "podNamespace": "kube-system",
    "timeoutSeconds": 120,
}


def test_one_host_per_node():
    assert PodTransport.hosts(["b", "a"]) == {"a": ["a"], "b": ["b"]}


def test_activation_pod_is_pinned_privileged_and_mounts_what_the_command_uses():
    transport = transport_for(PROPS)
    pod = transport.pod_manifest("gcu-node-7", ["activate", "--mode", "reload", "--runtime-path", "/usr/local/enflame/bin/rt"])
    kubernetes_validate.validate(pod, "1.25.0", strict=True)
    spec = pod["spec"]
    assert spec["nodeName"] == "gcu-node-7" and spec["hostPID"] is True and spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["image"] == PROPS["podImage"]
    assert container["command"][:2] == ["python3", ENTRYPOINT]
    command = container["command"]
    assert command[command.index("--daemon-json") + 1] == "/host/etc/docker/daemon.json"
    assert command[command.index("--docker-host") + 1] == "unix:///host/var/run/docker.sock"
    assert command[command.index("--pid-file") + 1] == "/host/run/docker.pid"
    assert command[command.index("--restart-command") + 1] == "nsenter -t 1 -m -u -i -n -p -- systemctl restart docker"
    mounted = {v["hostPath"]["path"] for v in spec["volumes"]}
    assert mounted == {"/etc/docker", "/var/run", "/run"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/host/etc/docker", "/host/var/run", "/host/run"}


def test_result_is_the_last_json_line_and_errors_name_the_node():
    assert parse_result("n", "starting\n{\"active\": true}\n") == {"active": True}
    with pytest.raises(RuntimeError, match="node n: /etc/docker/daemon.json is not valid JSON"):
        parse_result("n", '{"error": "node n: /etc/docker/daemon.json is not valid JSON (line 1)"}')
    with pytest.raises(RuntimeError, match="printed no result"):
        parse_result("n", "Traceback ...\n")


def test_settings_come_from_inputs_only():
    settings = RuntimeSettings.from_inputs(PROPS)
    assert settings.restart_command == ("systemctl", "restart", "docker")
