"""How the docker-runtime resource reaches a node's docker.

`local`: the machine running Pulumi is the node (single-node clusters, tests).
`pod`:   a short-lived privileged pod pinned to each node runs runtime_host.py
         from the toolkit image against the host's daemon.json and dockerd.
Both run the very same `runtime_host` functions.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from typing import Any, Optional

from . import runtime_host
from .cluster import core_api

LOCAL_HOST = "local"
ENTRYPOINT = "/opt/gcu-stack/runtime_host.py"


@dataclass(frozen=True)
class RuntimeSettings:
    """Resource inputs that say where docker's config lives and how to signal it."""

    daemon_json: str
    docker_host: str
    pid_file: str
    restart_command: tuple[str, ...]
    verify_seconds: float = 20.0

    @classmethod
    def from_inputs(cls, props: dict) -> "RuntimeSettings":
        return cls(
            daemon_json=props["daemonJson"],
            docker_host=props["dockerHost"],
            pid_file=props["pidFile"],
            restart_command=tuple(props["restartCommand"]),
            verify_seconds=float(props.get("verifySeconds") or 20.0),
        )


class LocalTransport:
    def __init__(self, settings: RuntimeSettings):
        self.settings = settings

    @staticmethod
    def hosts(nodes: list[str]) -> dict[str, list[str]]:
        # Every node is this one machine: one daemon.json, changed once.
        return {LOCAL_HOST: sorted(nodes)} if nodes else {}

    def _host(self, nodes: list[str]) -> runtime_host.LocalHost:
        s = self.settings
        return runtime_host.LocalHost(
            runtime_host.HostSettings(
                daemon_json=s.daemon_json,
                docker_host=s.docker_host,
                pid_file=s.pid_file,
                restart_command=list(s.restart_command),
                label=",".join(nodes) or LOCAL_HOST,
                verify_seconds=s.verify_seconds,
            )
        )

    def activate(self, host: str, nodes: list[str], runtime_path: str, mode: str) -> dict:
        return runtime_host.activate(self._host(nodes), runtime_path, mode)

    def restore(self, host: str, nodes: list[str], state: dict, mode: str) -> dict:
        return runtime_host.restore(self._host(nodes), state, mode)

    def inspect(self, host: str, nodes: list[str]) -> dict:
        local = self._host(nodes)
        content = local.read()
        return {"content": runtime_host.b64(content), "defaultRuntime": local.default_runtime()}


class PodTransport:
    """Runs runtime_host.py in a privileged pod on each node and reads its JSON result from the log."""

    def __init__(self, settings: RuntimeSettings, props: dict):
        self.settings = settings
        self.image = props["podImage"]
        self.namespace = props["podNamespace"]
        self.timeout = float(props.get("timeoutSeconds") or 300)
        self.kubeconfig = props.get("kubeconfig")
        self.context = props.get("context")

    @staticmethod
    def hosts(nodes: list[str]) -> dict[str, list[str]]:
        return {node: [node] for node in sorted(nodes)}

    def pod_manifest(self, node: str, argv: list[str]) -> dict:
        s = self.settings
        inside = runtime_host.in_container
        host_args = [
            "--daemon-json", inside(s.daemon_json),
            "--docker-host", "unix://" + inside(s.docker_host[len("unix://"):]),
            "--pid-file", inside(s.pid_file),
            # hostPID: PID 1 is the host's init, so nsenter reaches the host's systemd.
            "--restart-command", "nsenter -t 1 -m -u -i -n -p -- " + shlex.join(s.restart_command),
            "--node", node,
        ]
        directories = runtime_host.host_directories(s.daemon_json, s.docker_host, s.pid_file)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "gcu-runtime-activate-",
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "gcu-runtime-activate", "app.kubernetes.io/part-of": "gcu-stack"},
            },
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "hostPID": True,
                "automountServiceAccountToken": False,
                "priorityClassName": "system-node-critical",
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "activate",
                        "image": self.image,
                        "command": ["python3", ENTRYPOINT, *argv, *host_args],
                        # Privileged: it rewrites the host's daemon.json and signals the host's dockerd.
                        "securityContext": {"privileged": True},
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"cpu": "200m", "memory": "128Mi"},
                        },
                        "volumeMounts": [
                            {"name": f"host-{i}", "mountPath": inside(d)} for i, d in enumerate(directories)
                        ],
                    }
                ],
                "volumes": [
                    {"name": f"host-{i}", "hostPath": {"path": d, "type": "DirectoryOrCreate"}}
                    for i, d in enumerate(directories)
                ],
            },
        }

    def _run(self, node: str, argv: list[str]) -> dict:
        from kubernetes.client.exceptions import ApiException

        api = core_api(self.kubeconfig, self.context)
        created = api.create_namespaced_pod(self.namespace, self.pod_manifest(node, argv), _preload_content=False)
        name = json.loads(created.data)["metadata"]["name"]
        try:
            deadline = time.monotonic() + self.timeout
            phase = "Pending"
            while phase not in ("Succeeded", "Failed"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {node}: runtime activation pod {name} did not finish in {self.timeout:.0f}s")
                time.sleep(1)
                pod = json.loads(api.read_namespaced_pod(name, self.namespace, _preload_content=False).data)
                phase = (pod.get("status") or {}).get("phase", "Pending")
            log = api.read_namespaced_pod_log(name, self.namespace, _preload_content=False).data.decode()
            return parse_result(node, log)
        finally:
            try:
                api.delete_namespaced_pod(name, self.namespace, _preload_content=False)
            except ApiException:
                pass

    def activate(self, host: str, nodes: list[str], runtime_path: str, mode: str) -> dict:
        return self._run(host, ["activate", "--mode", mode, "--runtime-path", runtime_path])

    def restore(self, host: str, nodes: list[str], state: dict, mode: str) -> dict:
        return self._run(host, ["restore", "--mode", mode, "--state-json", json.dumps(state)])

    def inspect(self, host: str, nodes: list[str]) -> Optional[dict]:
        # Reading a node's file would take a pod per node on every refresh; refresh keeps the recorded state.
        return None


def parse_result(node: str, log: str) -> dict:
    lines = [line for line in log.strip().splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(f"node {node}: runtime activation printed no result; its log:\n{log[-2000:]}") from None
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def transport_for(props: dict) -> Any:
    settings = RuntimeSettings.from_inputs(props)
    if props["transport"] == "local":
        return LocalTransport(settings)
    return PodTransport(settings, props)
