"""Ask a *running* containerd, over its unix socket, what it has loaded. Standard library only.

A minimal gRPC client: HTTP/2 with prior knowledge (RFC 9113) over the socket, one unary
call per connection. The client sends the connection preface, its SETTINGS, one HEADERS
frame whose header block holds only literal fields (HPACK "literal without indexing,
new name", no Huffman coding, so no tables are needed to *send*), and one DATA frame with
the length-prefixed protobuf request. It acknowledges the server's SETTINGS and PINGs and
reads DATA frames of stream 1 until END_STREAM.

What it does not do: decode the server's header blocks. They are HPACK-compressed
(Huffman-coded names), and decoding them would need RFC 7541's Huffman table. The call's
result does not depend on them: a unary gRPC call that succeeded carries exactly one
response message in its DATA frames, a failed one carries none (the status is only in the
trailers). So a missing message is reported as a failed call, and `plugins()` (containerd's
introspection service, whose reply carries each plugin's init error as plain protobuf)
explains why the CRI service is missing when that is the cause.

    status(sock)   -> runtime.v1.RuntimeService/Status{verbose: true}: conditions, info, config
    version(sock)  -> containerd.services.version.v1.Version/Version: version, revision
    plugins(sock)  -> containerd.services.introspection.v1.Introspection/Plugins
    runtimes(sock) -> the CRI runtime handlers and the default one, from status()["config"]
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Optional

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 section 6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
STREAM = 1

CRI_STATUS = "/runtime.v1.RuntimeService/Status"
VERSION = "/containerd.services.version.v1.Version/Version"
PLUGINS = "/containerd.services.introspection.v1.Introspection/Plugins"


class CriError(Exception):
    """The daemon could not be reached or did not answer the call."""


# ----------------------------------------------------------------------------- protobuf


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(data):
            raise CriError("truncated protobuf varint")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7


def fields(data: bytes) -> list[tuple[int, object]]:
    """A protobuf message as (field number, value) pairs: ints for varints/fixed, bytes for length-delimited."""
    out: list[tuple[int, object]] = []
    offset = 0
    while offset < len(data):
        key, offset = _read_varint(data, offset)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, offset = _read_varint(data, offset)
        elif wire == 1:
            value, offset = struct.unpack_from("<Q", data, offset)[0], offset + 8
        elif wire == 2:
            length, offset = _read_varint(data, offset)
            value, offset = data[offset:offset + length], offset + length
        elif wire == 5:
            value, offset = struct.unpack_from("<I", data, offset)[0], offset + 4
        else:
            raise CriError(f"unsupported protobuf wire type {wire}")
        out.append((number, value))
    return out


def _string(value: object) -> str:
    return bytes(value).decode("utf-8", errors="replace")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- HTTP/2


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream & MAX_WINDOW) + payload


def _hpack_int(value: int, prefix_bits: int = 7) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((value,))
    out = bytearray((limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: str, value: str) -> bytes:
    """HPACK literal header field without indexing, new name, neither string Huffman-coded."""
    raw_name, raw_value = name.encode("ascii"), value.encode("ascii")
    return b"\x00" + _hpack_int(len(raw_name)) + raw_name + _hpack_int(len(raw_value)) + raw_value


def _request_headers(path: str, timeout: float) -> bytes:
    fields_ = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", f"{max(1, int(timeout * 1000))}m"),
        ("user-agent", "gcu-stack-cri-client/1"),
    ]
    return b"".join(_literal(n, v) for n, v in fields_)


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise CriError("connection closed by containerd")
        chunks += chunk
    return bytes(chunks)


def _socket_path(address: str) -> str:
    return address[len("unix://"):] if address.startswith("unix://") else address


def call(address: str, path: str, request: bytes = b"", timeout: float = 5.0) -> bytes:
    """One unary gRPC call; returns the response message's protobuf bytes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(_socket_path(address))
        except OSError as error:
            raise CriError(f"cannot connect to {address}: {error.strerror or error}") from None
        settings = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0) + struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW)
        message = b"\x00" + struct.pack(">I", len(request)) + request
        sock.sendall(
            PREFACE
            + _frame(SETTINGS, 0, 0, settings)
            # The connection window starts at 65535 whatever SETTINGS say: open it wide too.
            + _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW))
            + _frame(HEADERS, END_HEADERS, STREAM, _request_headers(path, timeout))
            + _frame(DATA, END_STREAM, STREAM, message)
        )
        body = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise CriError(f"{path}: no complete answer within {timeout:.0f}s")
            header = _recv_exact(sock, 9)
            length = int.from_bytes(header[:3], "big")
            kind, flags = header[3], header[4]
            stream = int.from_bytes(header[5:9], "big") & MAX_WINDOW
            payload = _recv_exact(sock, length)
            if kind == SETTINGS and not flags & ACK:
                sock.sendall(_frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                sock.sendall(_frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                last = struct.unpack(">I", payload[:4])[0] & MAX_WINDOW if len(payload) >= 8 else 0
                code = struct.unpack(">I", payload[4:8])[0] if len(payload) >= 8 else -1
                if code != 0 or last < STREAM:
                    raise CriError(f"{path}: containerd closed the connection (GOAWAY, error code {code}): {payload[8:].decode(errors='replace')}")
            elif kind == RST_STREAM and stream == STREAM:
                code = struct.unpack(">I", payload[:4])[0] if len(payload) >= 4 else -1
                raise CriError(f"{path}: containerd reset the call (RST_STREAM, error code {code})")
            elif kind == DATA and stream == STREAM:
                if flags & PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                body += payload
                if flags & END_STREAM:
                    break
            elif kind == HEADERS and stream == STREAM and flags & END_STREAM:
                break  # trailers (or a trailers-only error answer) end the call
        return _message(path, bytes(body))
    except socket.timeout:
        raise CriError(f"{path}: {address} did not answer within {timeout:.0f}s") from None
    except OSError as error:
        raise CriError(f"{path}: {address}: {error.strerror or error}") from None
    finally:
        sock.close()


def _message(path: str, body: bytes) -> bytes:
    if len(body) < 5:
        raise CriError(f"{path}: containerd answered without a result (the call failed; gRPC status in the trailers)")
    compressed, length = body[0], struct.unpack(">I", body[1:5])[0]
    if compressed:
        raise CriError(f"{path}: compressed answer (not requested)")
    if len(body) < 5 + length:
        raise CriError(f"{path}: truncated answer ({len(body) - 5} of {length} bytes)")
    return body[5:5 + length]


# ----------------------------------------------------------------------------- calls


def status(address: str, timeout: float = 5.0) -> dict:
    """CRI Status with verbose info: {"conditions": {type: {"status", "reason", "message"}}, "info": {...}, "config": dict|None}."""
    reply = call(address, CRI_STATUS, b"\x08\x01", timeout)  # StatusRequest{verbose: true}
    conditions: dict[str, dict] = {}
    info: dict[str, str] = {}
    for number, value in fields(reply):
        if number == 1:  # RuntimeStatus
            for inner_number, condition in fields(value):  # type: ignore[arg-type]
                if inner_number != 1:
                    continue
                parts = dict(fields(condition))  # type: ignore[arg-type]
                conditions[_string(parts.get(1, b""))] = {
                    "status": bool(parts.get(2, 0)),
                    "reason": _string(parts.get(3, b"")),
                    "message": _string(parts.get(4, b"")),
                }
        elif number == 2:  # map<string, string> info: entries {key = 1, value = 2}
            entry = dict(fields(value))  # type: ignore[arg-type]
            info[_string(entry.get(1, b""))] = _string(entry.get(2, b""))
    config = None
    if "config" in info:
        try:
            config = json.loads(info["config"])
        except json.JSONDecodeError:
            config = None
    return {"conditions": conditions, "info": info, "config": config}


def version(address: str, timeout: float = 5.0) -> dict:
    parts = dict(fields(call(address, VERSION, b"", timeout)))
    return {"version": _string(parts.get(1, b"")), "revision": _string(parts.get(2, b""))}


def plugins(address: str, timeout: float = 5.0) -> list[dict]:
    """Every plugin containerd knows: type, id and, when it failed to load, its init error."""
    out = []
    for number, value in fields(call(address, PLUGINS, b"", timeout)):
        if number != 1:
            continue
        plugin: dict = {"type": "", "id": "", "error": None}
        for inner, item in fields(value):  # type: ignore[arg-type]
            if inner == 1:
                plugin["type"] = _string(item)
            elif inner == 2:
                plugin["id"] = _string(item)
            elif inner == 7:  # google.rpc.Status init_err: code = 1, message = 2
                err = dict(fields(item))  # type: ignore[arg-type]
                plugin["error"] = _string(err.get(2, b"")) or f"code {err.get(1, 0)}"
        out.append(plugin)
    return out


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
