"""Pieces several component entries share: host mounts, probes, the one-workload shape."""

from __future__ import annotations

from ..model import ContainerDef, HostMount, WorkloadDef
from ..names import KUBELET_DEVICE_PLUGINS

DEV = HostMount("dev", "/dev", "/dev")
SYS = HostMount("sys", "/sys", "/host/sys")
DEVICE_PLUGINS = HostMount("device-plugins", KUBELET_DEVICE_PLUGINS, KUBELET_DEVICE_PLUGINS, read_only=False)
GCU_LOGS = HostMount("gcu-logs", "/var/log/topscloud", "/var/log/topscloud", read_only=False, type="DirectoryOrCreate")

TOPSCLOUD_HINT = "it ships in the topscloud (or TopsRider) release package; copy it there"


def one(container: ContainerDef, **workload: object) -> tuple[WorkloadDef, ...]:
    """The usual shape: one workload running one container."""
    return (WorkloadDef(containers=(container,), **workload),)  # type: ignore[arg-type]


def tcp_ready(port: int) -> dict:
    return {"tcpSocket": {"port": port}, "initialDelaySeconds": 5, "periodSeconds": 10}


def http_ready(path: str, port: int) -> dict:
    return {"httpGet": {"path": path, "port": port}, "initialDelaySeconds": 5, "periodSeconds": 10}
