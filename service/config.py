"""The service's settings, checked before it listens: a service that would be open to anyone does not start."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# gum's directories on its node.
GUM_BLUEPRINTS = Path("/topsdata/dcp/gcu-upgrade-manager/blueprints")
GUM_OPLOG = Path("/topsdata/dcp/gcu-upgrade-manager/op-log")
GUM_PORT = 32765
MIN_TOKEN = 16


class ConfigError(ValueError):
    """A setting that keeps the service from starting, named with what to do."""


@dataclass(frozen=True)
class ServiceConfig:
    project_dir: Path
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = GUM_PORT
    token: Optional[str] = None
    blueprints_dir: Path = GUM_BLUEPRINTS
    oplog_dir: Path = GUM_OPLOG
    tls_cert: Optional[Path] = None
    tls_key: Optional[Path] = None
    max_body: int = 64 * 1024  # a request body is a file name or a policy: a few bytes
    config_dir: Optional[Path] = None  # the stacks' Pulumi.<stack>.yaml; None: the project directory
    # In the cluster: the stack whose upgradeManager runs this service (a PUT may not replace it, a DELETE keeps it).
    own_stack: Optional[str] = None

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def read_token(path: Path) -> str:
    """The bearer token in `path` (a file of its own, or a Kubernetes Secret's key mounted as one)."""
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise ConfigError(f"--token-file {path}: cannot read it ({error.strerror})") from None
    if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
        raise ConfigError(f"--token-file {path}: the token must be one word of at least {MIN_TOKEN} characters "
                          "(make one: `openssl rand -hex 32 > token`)")
    return token


def build(project_dir: Path, state_dir: Path, listen: str, token_file: Optional[Path], no_auth: bool,
          blueprints_dir: Path, oplog_dir: Path, tls_cert: Optional[Path], tls_key: Optional[Path],
          max_body: int, config_dir: Optional[Path] = None, own_stack: Optional[str] = None) -> ServiceConfig:
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"--listen {listen}: give HOST:PORT, e.g. 0.0.0.0:{GUM_PORT}")
    if token_file and no_auth:
        raise ConfigError("--token-file and --no-auth: give one")
    token = read_token(token_file) if token_file else None
    config = ServiceConfig(project_dir=project_dir, state_dir=state_dir, host=host, port=int(port_text), token=token,
                           blueprints_dir=blueprints_dir, oplog_dir=oplog_dir, tls_cert=tls_cert, tls_key=tls_key,
                           max_body=max_body, config_dir=config_dir, own_stack=own_stack)
    if token is None and not no_auth:
        raise ConfigError("no token: give --token-file FILE (requests then need `Authorization: Bearer <token>`), "
                          "or --no-auth on a loopback address only")
    if no_auth and not config.loopback:
        raise ConfigError(f"--no-auth on {host}: anyone who reaches it could upgrade or delete the stack; --no-auth is "
                          "accepted only on a loopback address (127.0.0.1, ::1); elsewhere give --token-file")
    if bool(tls_cert) != bool(tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    for path in (tls_cert, tls_key):
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"{path}: cannot read it")
    if not blueprints_dir.is_dir():
        raise ConfigError(f"--blueprints {blueprints_dir}: no such directory (create it, or point --blueprints at the "
                          "directory your blueprints are in)")
    if config_dir is not None and not config_dir.is_dir():
        raise ConfigError(f"--config-dir {config_dir}: no such directory (the one holding the stacks' "
                          "Pulumi.<stack>.yaml)")
    if max_body < 1024:
        raise ConfigError(f"--max-body {max_body}: at least 1024 bytes")
    return config
