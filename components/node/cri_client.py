"""Ask a *running* containerd, over its unix socket, what it has loaded: grpcio with the generated
CRI and containerd API code in runtime_api/ (see its __init__.py for the sources and versions).

    status(sock)   -> runtime.v1.RuntimeService/Status{verbose: true}: conditions, info, config
    version(sock)  -> containerd.services.version.v1.Version/Version: version, revision
    plugins(sock)  -> containerd.services.introspection.v1.Introspection/Plugins
    runtimes(sock) -> the CRI runtime handlers and the default one, from status()["config"]
    explain(sock)  -> why the CRI service may be missing (its plugins' init errors)

Each call opens its own channel and closes it: containerd is restarted between calls.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import grpc
from google.protobuf import empty_pb2

try:
    from .runtime_api import api_pb2, introspection_pb2, version_pb2
except ImportError:  # run as a script (pod, toolkit image): runtime_api/ sits next to this file
    from runtime_api import api_pb2, introspection_pb2, version_pb2  # type: ignore[no-redef]

CRI_STATUS = "/runtime.v1.RuntimeService/Status"
VERSION = "/containerd.services.version.v1.Version/Version"
PLUGINS = "/containerd.services.introspection.v1.Introspection/Plugins"


class CriError(Exception):
    """The daemon could not be reached or did not answer the call."""


def _socket_path(address: str) -> str:
    return address[len("unix://"):] if address.startswith("unix://") else address


def _call(address: str, method: str, request: Any, reply_type: Any, timeout: float) -> Any:
    """One unary call of `method` on a channel of its own (grpcio's generic client: only the messages are generated);
    every failure becomes a CriError naming the socket and the call."""
    with grpc.insecure_channel("unix:" + _socket_path(address)) as channel:
        call = channel.unary_unary(method, request_serializer=type(request).SerializeToString,
                                   response_deserializer=reply_type.FromString)
        try:
            return call(request, timeout=timeout)
        except grpc.RpcError as error:
            code, details = error.code(), error.details()  # type: ignore[attr-defined]
    if code == grpc.StatusCode.UNAVAILABLE:
        raise CriError(f"{method}: cannot connect to {address}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        raise CriError(f"{method}: {address} did not answer within {timeout:g}s")
    raise CriError(f"{method}: {address} answered {code.name}: {details}")


def status(address: str, timeout: float = 5.0) -> dict:
    """CRI Status with verbose info: {"conditions": {type: {"status", "reason", "message"}}, "info": {...}, "config": dict|None}."""
    reply = _call(address, CRI_STATUS, api_pb2.StatusRequest(verbose=True), api_pb2.StatusResponse, timeout)
    conditions = {c.type: {"status": c.status, "reason": c.reason, "message": c.message} for c in reply.status.conditions}
    info = dict(reply.info)
    config = None
    if "config" in info:
        try:
            config = json.loads(info["config"])
        except json.JSONDecodeError:
            config = None
    return {"conditions": conditions, "info": info, "config": config}


def version(address: str, timeout: float = 5.0) -> dict:
    reply = _call(address, VERSION, empty_pb2.Empty(), version_pb2.VersionResponse, timeout)
    return {"version": reply.version, "revision": reply.revision}


def plugins(address: str, timeout: float = 5.0) -> list[dict]:
    """Every plugin containerd knows: type, id and, when it failed to load, its init error."""
    reply = _call(address, PLUGINS, introspection_pb2.PluginsRequest(), introspection_pb2.PluginsResponse, timeout)
    return [{"type": p.type, "id": p.id,
             "error": (p.init_err.message or f"code {p.init_err.code}") if p.HasField("init_err") else None}
            for p in reply.plugins]


def runtimes(address: str, timeout: float = 5.0) -> dict:
    """{"default": name, "runtimes": {name: {"type", "binaryName"}}} as the running CRI plugin reports them.

    containerd 1.6/1.7 report the CRI config under info["config"]["containerd"]; 2.x keeps the
    same names (defaultRuntimeName, runtimes[].runtimeType, runtimes[].options.BinaryName)."""
    config = status(address, timeout)["config"]
    if not isinstance(config, dict):
        raise CriError("CRI Status carried no config (verbose info without a 'config' entry)")
    section = config.get("containerd") if isinstance(config.get("containerd"), dict) else config
    handlers = {}
    for name, runtime in (section.get("runtimes") or {}).items():
        runtime = runtime or {}
        options = runtime.get("options") or {}
        handlers[name] = {"type": runtime.get("runtimeType"), "binaryName": options.get("BinaryName") if isinstance(options, dict) else None}
    return {"default": section.get("defaultRuntimeName"), "runtimes": handlers}


def explain(address: str, timeout: float = 5.0) -> Optional[str]:
    """Why the CRI service may be missing: its plugins' init errors, or None when nothing is known."""
    try:
        found = plugins(address, timeout)
    except CriError:
        return None
    cri = [p for p in found if p["type"] in ("io.containerd.grpc.v1", "io.containerd.cri.v1") and p["id"] in ("cri", "runtime", "images")]
    if not cri:
        return "containerd has no CRI plugin loaded (disabled_plugins, or a build without CRI)"
    failed = [f"{p['type']}.{p['id']}: {p['error']}" for p in cri if p["error"]]
    return "; ".join(failed) or None
