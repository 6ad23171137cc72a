"""Docker's default runtime on one host: make it `enflame`, and put it back exactly.

Standard library only: the same file runs inside the dynamic provider (local
transport), inside the short-lived activation pod (pod transport) and as the
toolkit image's entrypoint on nodes that join later, so all three agree.

    python3 runtime_host.py activate --runtime-path P [--daemon-json F] [--mode reload|restart|none]
    python3 runtime_host.py restore  --state-json S [--daemon-json F] [--mode ...]

Both print one JSON object (the host's state) as their last line of output.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

try:
    from . import hostfiles
except ImportError:  # run as a script (pod, toolkit image): hostfiles.py sits next to this file
    import hostfiles  # type: ignore[no-redef]

b64, unb64 = hostfiles.b64, hostfiles.unb64

RUNTIME_NAME = "enflame"
# Where the toolkit image installs the enflame container runtime on the host.
DEFAULT_RUNTIME_PATH = "/usr/local/enflame/bin/enflame-container-runtime"
DOCKER_DEFAULT_RUNTIME = "runc"
MODES = ("reload", "restart", "none")
BACKUP_SUFFIX = hostfiles.BACKUP_SUFFIX
ActivationError = hostfiles.RolledBack  # docker did not take the runtime; the previous file was put back


class DaemonJsonError(hostfiles.Refused):
    """daemon.json is unusable; nothing was written."""


@dataclass
class HostSettings:
    """Where docker's config, socket and pid file are on a host: the defaults every caller uses."""

    daemon_json: str = "/etc/docker/daemon.json"
    docker_host: str = "unix:///var/run/docker.sock"
    pid_file: str = "/var/run/docker.pid"
    restart_command: list[str] = field(default_factory=lambda: ["systemctl", "restart", "docker"])
    label: str = "localhost"  # how errors name this host (the node name)
    verify_seconds: float = 20.0


def host_directories(daemon_json: str, docker_host: str, pid_file: str) -> list[str]:
    """Host directories a container needs mounted (at /host<dir>) to reach docker's config, socket and pid file."""
    paths = (daemon_json, docker_host[len("unix://"):], pid_file)
    return sorted({os.path.dirname(p) or "/" for p in paths})


def in_container(host_path: str) -> str:
    """Where a host path appears inside a container that mounted its directory under /host."""
    return "/host" + host_path


def parse(text: Optional[bytes], settings: HostSettings) -> dict:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        where = f"line {error.lineno} column {error.colno}: {error.msg}" if isinstance(error, json.JSONDecodeError) else str(error)
        raise DaemonJsonError(
            f"node {settings.label}: {settings.daemon_json} is not valid JSON ({where}); "
            "it was left untouched: fix or remove it, then run `pulumi up` again"
        ) from None
    if not isinstance(value, dict):
        raise DaemonJsonError(
            f"node {settings.label}: {settings.daemon_json} must hold a JSON object; it was left untouched"
        )
    return value


def render(config: dict) -> bytes:
    return (json.dumps(config, indent=2) + "\n").encode("utf-8")


def with_runtime(config: dict, runtime_path: str) -> dict:
    """`config` plus runtimes.enflame and default-runtime, every other key kept in place."""
    result = dict(config)
    runtimes = dict(result.get("runtimes") or {})
    runtimes[RUNTIME_NAME] = {"path": runtime_path}
    result["runtimes"] = runtimes
    result["default-runtime"] = RUNTIME_NAME
    return result


def without_runtime(current: dict, original: dict) -> dict:
    """Undo only our two keys in a file someone else has edited since: each goes back to its original value."""
    result = dict(current)
    runtimes = dict(result.get("runtimes") or {})
    if RUNTIME_NAME in (original.get("runtimes") or {}):
        runtimes[RUNTIME_NAME] = original["runtimes"][RUNTIME_NAME]
    else:
        runtimes.pop(RUNTIME_NAME, None)
    if runtimes:
        result["runtimes"] = runtimes
    else:
        result.pop("runtimes", None)
    if result.get("default-runtime") == RUNTIME_NAME:
        if "default-runtime" in original:
            result["default-runtime"] = original["default-runtime"]
        else:
            result.pop("default-runtime")
    return result


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class LocalHost:
    """File, signal and Docker API operations on the machine this code runs on."""

    def __init__(self, settings: HostSettings):
        self.settings = settings

    @property
    def backup_path(self) -> str:
        return self.settings.daemon_json + BACKUP_SUFFIX

    def read(self, path: Optional[str] = None) -> Optional[bytes]:
        return hostfiles.read(path or self.settings.daemon_json)

    def write_atomic(self, content: bytes, path: Optional[str] = None) -> None:
        target = path or self.settings.daemon_json
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        hostfiles.write_atomic(target, content, like=self.settings.daemon_json)

    def remove(self, path: Optional[str] = None) -> None:
        hostfiles.remove(path or self.settings.daemon_json)

    def reload(self) -> None:
        with open(self.settings.pid_file) as handle:
            os.kill(int(handle.read().strip()), signal.SIGHUP)

    def restart(self) -> None:
        subprocess.run(self.settings.restart_command, check=True, capture_output=True, timeout=300)

    def default_runtime(self) -> Optional[str]:
        """Docker's own word (GET /info), or None while it does not answer."""
        host = self.settings.docker_host
        if not host.startswith("unix://"):
            raise ValueError(f"docker host {host!r}: only unix:// sockets are supported")
        connection = _UnixConnection(host[len("unix://"):], timeout=5)
        try:
            connection.request("GET", "/info")
            response = connection.getresponse()
            if response.status != 200:
                return None
            return json.loads(response.read()).get("DefaultRuntime")
        except OSError:
            return None
        finally:
            connection.close()


def _signal(host: LocalHost, mode: str) -> None:
    if mode == "reload":
        host.reload()
    elif mode == "restart":
        host.restart()


def _wait_for_runtime(host: LocalHost, wanted: str) -> Optional[str]:
    deadline = time.monotonic() + host.settings.verify_seconds
    seen = host.default_runtime()
    while seen != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = host.default_runtime()
    return seen


def _put(host: LocalHost, content: Optional[bytes]) -> None:
    if content is None:
        host.remove()
    else:
        host.write_atomic(content)


def _apply(host: LocalHost, content: Optional[bytes], mode: str) -> None:
    """Write `content` (None: no file) and make the running dockerd match it.

    dockerd's reload keeps `default-runtime` and `runtimes` when a file omits them
    (checked: SIGHUP after removing the keys still reports enflame). So before the
    exact bytes go back, the same config with those defaults spelled out is loaded.
    """
    if mode == "reload":
        config = parse(content, host.settings)
        explicit = {
            **config,
            "default-runtime": config.get("default-runtime", DOCKER_DEFAULT_RUNTIME),
            "runtimes": config.get("runtimes", {}),
        }
        if explicit != config:
            host.write_atomic(render(explicit))
            host.reload()
            _wait_for_runtime(host, explicit["default-runtime"])
            _put(host, content)
            return
    _put(host, content)
    _signal(host, mode)


def _original(host: LocalHost) -> tuple[Optional[bytes], bool]:
    """The file as it was before gcu-stack touched it: the backup if an earlier run left one."""
    backup = host.read(host.backup_path)
    if backup is not None:
        saved = json.loads(backup)
        return unb64(saved["original"]), True
    return host.read(), False


def activate(host: LocalHost, runtime_path: str, mode: str) -> dict:
    """Make `enflame` docker's default runtime; returns the state needed to undo it."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    current = host.read()
    config = parse(current, host.settings)  # refuses a broken file before anything is written
    original, had_backup = _original(host)
    parse(original, host.settings)
    desired = with_runtime(config, runtime_path)
    changed = desired != config
    written = render(desired) if changed else current
    if changed:
        if not had_backup:
            host.write_atomic(json.dumps({"original": b64(original)}).encode(), host.backup_path)
        host.write_atomic(written)
        try:
            _signal(host, mode)
        except Exception as error:  # noqa: BLE001 - rolled back and re-raised with the node named
            _roll_back(host, current, mode, had_backup)
            raise ActivationError(f"node {host.settings.label}: could not {mode} docker: {error}; "
                                  f"the previous {host.settings.daemon_json} was put back") from None
    active = None
    if mode != "none":
        seen = _wait_for_runtime(host, RUNTIME_NAME)
        active = seen == RUNTIME_NAME
        if not active and changed:
            _roll_back(host, current, mode, had_backup)
            raise ActivationError(
                f"node {host.settings.label}: docker reports default runtime {seen!r}, not {RUNTIME_NAME!r}, "
                f"after {mode}; the previous {host.settings.daemon_json} was put back"
            )
    return {
        "original": b64(original),
        "written": b64(written),
        "changed": changed,
        "active": active,
        "message": (
            f"{host.settings.daemon_json} written; docker uses the enflame runtime only after its next restart"
            if mode == "none" and changed
            else "enflame is the default runtime" if active else "unchanged"
        ),
    }


def _roll_back(host: LocalHost, previous: Optional[bytes], mode: str, had_backup: bool) -> None:
    try:
        _apply(host, previous, mode)
    except Exception:  # noqa: BLE001 - the original error is the one to report
        _put(host, previous)
    if not had_backup:
        host.remove(host.backup_path)


def restore(host: LocalHost, state: dict, mode: str) -> dict:
    """Put back what `activate` changed: the original bytes if the file is still ours, else only our keys."""
    original = unb64(state.get("original"))
    written = unb64(state.get("written"))
    current = host.read()
    if current == written:
        target = original
    else:
        merged = without_runtime(parse(current, host.settings), parse(original, host.settings))
        target = current if merged == parse(current, host.settings) else render(merged)
    changed = target != current
    if changed:
        _apply(host, target, mode)
    host.remove(host.backup_path)
    return {"restored": changed, "exact": current == written}


def inspect(host: LocalHost, state: Optional[dict] = None, runtime_path: Optional[str] = None, mode: Optional[str] = None) -> dict:
    """For `pulumi refresh`: is daemon.json still what gcu-stack wrote, and is enflame docker's default?"""
    state = {**(state or {}), **({"mode": mode} if mode else {})}
    content = host.read()
    seen = host.default_runtime()
    drift = []
    written = state.get("written")
    if written is not None and b64(content) != written:
        drift.append(f"{host.settings.daemon_json} differs from what gcu-stack wrote")
    if state.get("mode", "reload") != "none" and seen != RUNTIME_NAME:
        drift.append(f"docker's default runtime is {seen!r}")
    return {"content": b64(content), "defaultRuntime": seen, "active": seen == RUNTIME_NAME, "drift": drift}


def main(argv: Optional[list[str]] = None) -> int:
    defaults = HostSettings()
    parser = hostfiles.cli(__doc__, "DOCKER", (
        ("--daemon-json", "DAEMON_JSON", defaults.daemon_json),
        ("--docker-host", "DOCKER_HOST", defaults.docker_host),
        ("--pid-file", "DOCKER_PID_FILE", defaults.pid_file),
    ))
    parser.add_argument("--mode", choices=MODES, default=os.environ.get("RUNTIME_ACTIVATION", "reload"))
    args = parser.parse_args(argv)
    return hostfiles.run(parser, args, sys.modules[__name__], LocalHost(hostfiles.settings_from(args, HostSettings)))


if __name__ == "__main__":
    sys.exit(main())
