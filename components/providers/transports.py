"""How the container-runtime resource reaches a node's runtime, for each runtime.

Backends (what to run): `DockerBackend` (runtime_host.py: daemon.json, SIGHUP or restart)
and `ContainerdBackend` (containerd_host.py: a drop-in, a restart, CRI verification).
Transports (where): `local` — the machine running Pulumi is the node (single-node
clusters, tests); `pod` — a short-lived privileged pod pinned to each node runs the very
same module from the toolkit image against the host's files, mounted under /host.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from typing import Any, Optional

from ..node import NODE_CODE_DIR, containerd_host, runtime_host
from .cluster import core_api

# Host keys of the local transport: one per runtime, since the node is this machine.
# ("local" is docker's: the key a stack deployed by an earlier release has in its state.)
LOCAL_HOSTS = {"docker": "local", "containerd": "local-containerd"}
HOST_ROOT = "/host"
# hostPID: PID 1 is the host's init, so nsenter reaches the host's systemd (and its restart of the runtime).
IN_HOST = ("nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--")
ACTIVATION_POD = "gcu-runtime-activate"
RUN_ATTEMPTS = 3  # runs of a runtime pod that printed no result (killed by a runtime restart: PodTransport._run)


def in_pod(options: dict) -> list[str]:
    """A runtime's restart command as a pod on the node runs it: in the host's namespaces unless told otherwise."""
    command = list(options["restartCommand"])
    return command if options.get("restartIn") == "container" else [*IN_HOST, *command]


class Backend:
    """What to run for one runtime (`runtime`), from its options (`gcu-stack:<runtime settings>` by alias)."""

    runtime: str
    script: str  # the node-code module the pods run
    module: Any  # that module: activate / restore / inspect, the same on every runtime
    host_type: type  # its host: what those functions act on, made from the backend's settings(label)

    def __init__(self, options: dict):
        self.options = options

    def host(self, label: str) -> Any:
        """This machine as the node."""
        return self.host_type(self.settings(label))

    # -- on this machine
    def activate_local(self, label: str) -> dict:
        return self.module.activate(self.host(label), self.options["runtimePath"], self.options["mode"])

    def restore_local(self, label: str, state: dict) -> dict:
        return self.module.restore(self.host(label), state, self.options["mode"])

    def inspect_local(self, label: str, state: dict) -> dict:
        return self.module.inspect(self.host(label), state, self.options["runtimePath"], self.options["mode"])


class DockerBackend(Backend):
    """docker on a node: enflame as the default runtime in daemon.json."""

    runtime, script, module, host_type = "docker", "runtime_host.py", runtime_host, runtime_host.LocalHost

    def settings(self, label: str, inside: bool = False) -> runtime_host.HostSettings:
        o = self.options
        place = runtime_host.in_container if inside else (lambda path: path)
        return runtime_host.HostSettings(
            daemon_json=place(o["daemonJson"]),
            docker_host="unix://" + place(o["dockerHost"][len("unix://"):]),
            pid_file=place(o["pidFile"]),
            restart_command=in_pod(o) if inside else list(o["restartCommand"]),
            label=label,
            verify_seconds=float(o.get("verifySeconds") or 20.0),
        )

    def directories(self) -> list[str]:
        o = self.options
        return runtime_host.host_directories(o["daemonJson"], o["dockerHost"], o["pidFile"])

    # -- in a pod on the node
    def arguments(self, action: str, node: str, state: Optional[dict]) -> list[str]:
        s = self.settings(node, inside=True)
        argv = [action, "--mode", self.options["mode"], "--daemon-json", s.daemon_json, "--docker-host", s.docker_host,
                "--pid-file", s.pid_file, "--restart-command", shlex.join(s.restart_command), "--node", node]
        if action == "activate":
            argv += ["--runtime-path", self.options["runtimePath"]]
        if state is not None:
            argv += ["--state-json", json.dumps(state)]
        return argv


class ContainerdBackend(Backend):
    """containerd on a node: the enflame runtime handler in a drop-in, its default unless turned off."""

    runtime, script, module, host_type = "containerd", "containerd_host.py", containerd_host, containerd_host.ContainerdHost

    def settings(self, label: str, inside: bool = False) -> containerd_host.ContainerdSettings:
        o = self.options
        return containerd_host.ContainerdSettings(
            config_toml=o["configToml"],
            dropin=o["dropin"],
            address=o["address"],
            restart_command=in_pod(o) if inside else list(o["restartCommand"]),
            set_default=bool(o["setDefaultRuntime"]),
            host_root=HOST_ROOT if inside else "",
            label=label,
            verify_seconds=float(o.get("verifySeconds") or 30.0),
            config_version=o.get("configVersion"),
        )

    def directories(self) -> list[str]:
        return containerd_host.host_directories(self.settings("-"))

    # -- in a pod on the node
    def arguments(self, action: str, node: str, state: Optional[dict]) -> list[str]:
        s = self.settings(node, inside=True)
        argv = [action, "--mode", self.options["mode"], "--config-toml", s.config_toml, "--dropin", s.dropin,
                "--address", s.address, "--restart-command", shlex.join(s.restart_command), "--host-root", HOST_ROOT,
                "--verify-seconds", str(s.verify_seconds), "--node", node, "--runtime-path", self.options["runtimePath"]]
        if not s.set_default:
            argv.append("--no-default")
        if s.config_version:
            argv += ["--config-version", str(s.config_version)]
        if state is not None:
            argv += ["--state-json", json.dumps(state)]
        return argv


BACKENDS = {b.runtime: b for b in (DockerBackend, ContainerdBackend)}


class LocalTransport:
    """This machine is the node: every node of one runtime is one host, changed once."""

    def __init__(self, backend: Any):
        self.backend = backend

    def hosts(self, nodes: list[str]) -> dict[str, list[str]]:
        return {LOCAL_HOSTS[self.backend.runtime]: sorted(nodes)} if nodes else {}

    def activate(self, host: str, nodes: list[str]) -> dict:
        return self.backend.activate_local(",".join(nodes) or host)

    def restore(self, host: str, nodes: list[str], state: dict) -> dict:
        return self.backend.restore_local(",".join(nodes) or host, state)

    def inspect(self, host: str, nodes: list[str], state: dict) -> dict:
        return self.backend.inspect_local(",".join(nodes) or host, state)


@dataclass
class PodSettings:
    image: str
    namespace: str
    timeout: float
    kubeconfig: Any
    context: Optional[str]


class PodTransport:
    """Runs the backend's module in a privileged pod on each node and reads its JSON result from the log."""

    def __init__(self, backend: Any, pod: PodSettings):
        self.backend = backend
        self.pod = pod

    @staticmethod
    def hosts(nodes: list[str]) -> dict[str, list[str]]:
        return {node: [node] for node in sorted(nodes)}

    def pod_manifest(self, node: str, argv: list[str]) -> dict:
        directories = self.backend.directories()
        inside = runtime_host.in_container
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{ACTIVATION_POD}-",
                "namespace": self.pod.namespace,
                "labels": {"app.kubernetes.io/name": ACTIVATION_POD, "app.kubernetes.io/part-of": "gcu-stack"},
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
                        "image": self.pod.image,
                        "command": ["python3", f"{NODE_CODE_DIR}/{self.backend.script}", *argv],
                        # Privileged: it rewrites the runtime's config on the host and restarts or signals it.
                        "securityContext": {"privileged": True},
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"cpu": "200m", "memory": "128Mi"},
                        },
                        # Exactly the directories of this runtime's files, where the module expects them.
                        "volumeMounts": [{"name": f"host-{i}", "mountPath": inside(d)} for i, d in enumerate(directories)],
                    }
                ],
                "volumes": [
                    {"name": f"host-{i}", "hostPath": {"path": d, "type": "DirectoryOrCreate"}}
                    for i, d in enumerate(directories)
                ],
            },
        }

    def _run(self, node: str, argv: list[str]) -> dict:
        """The module's result on `node`. A pod that ends without printing one was killed from outside: the toolkit's
        own pod on that node restarts the same runtime when it activates it, and a runtime restart while our
        container is being started takes the container with it. The action is idempotent (the same files, a
        restart only when they change), so it runs again, up to RUN_ATTEMPTS times."""
        logs = []
        for _ in range(RUN_ATTEMPTS):
            log = self._run_once(node, argv)
            try:
                return parse_result(node, log)
            except NoResult:
                logs.append(log)
        raise RuntimeError(f"node {node}: the runtime pod printed no result in {RUN_ATTEMPTS} runs; their logs:\n"
                           + "\n---\n".join(text[-1500:] for text in logs))

    def _run_once(self, node: str, argv: list[str]) -> str:
        """One pod running the module on `node`, to its end: its log."""
        from kubernetes.client.exceptions import ApiException

        api = core_api(self.pod.kubeconfig, self.pod.context)
        namespace = self.pod.namespace
        created = api.create_namespaced_pod(namespace, self.pod_manifest(node, argv), _preload_content=False)
        name = json.loads(created.data)["metadata"]["name"]
        try:
            deadline = time.monotonic() + self.pod.timeout
            phase = "Pending"
            while phase not in ("Succeeded", "Failed"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {node}: runtime pod {name} did not finish in {self.pod.timeout:.0f}s")
                time.sleep(1)
                pod = json.loads(api.read_namespaced_pod(name, namespace, _preload_content=False).data)
                phase = (pod.get("status") or {}).get("phase", "Pending")
            return api.read_namespaced_pod_log(name, namespace, _preload_content=False).data.decode()
        finally:
            try:
                api.delete_namespaced_pod(name, namespace, _preload_content=False)
            except ApiException:
                pass

    def activate(self, host: str, nodes: list[str]) -> dict:
        return self._run(host, self.backend.arguments("activate", host, None))

    def restore(self, host: str, nodes: list[str], state: dict) -> dict:
        return self._run(host, self.backend.arguments("restore", host, state))

    def inspect(self, host: str, nodes: list[str], state: dict) -> dict:
        return self._run(host, self.backend.arguments("inspect", host, state))


class NoResult(RuntimeError):
    """The runtime pod ended without printing its JSON result."""


def parse_result(node: str, log: str) -> dict:
    lines = [line for line in log.strip().splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise NoResult(f"node {node}: the runtime pod printed no result; its log:\n{log[-2000:]}") from None
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def transport_for(props: dict, runtime: str) -> Any:
    """The transport for one runtime's nodes, from a ContainerRuntime resource's properties."""
    options = props[runtime]
    backend = BACKENDS[runtime](options)
    if options["transport"] == "local":
        return LocalTransport(backend)
    pod = PodSettings(
        image=props["podImage"],
        namespace=props["podNamespace"],
        timeout=float(props.get("timeoutSeconds") or 300),
        kubeconfig=props.get("kubeconfig"),
        context=props.get("context"),
    )
    return PodTransport(backend, pod)
