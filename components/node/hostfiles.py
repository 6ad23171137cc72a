"""Files on a node, changed so that a crash never leaves half a file: shared by the runtime modules.

Standard library only: it runs in the provider, in the activation pod and in the toolkit image.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import tempfile
from typing import Optional


def b64(content: Optional[bytes]) -> Optional[str]:
    return None if content is None else base64.b64encode(content).decode("ascii")


def unb64(text: Optional[str]) -> Optional[bytes]:
    return None if text is None else base64.b64decode(text)


def read(path: str) -> Optional[bytes]:
    """The file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_atomic(path: str, content: bytes, like: Optional[str] = None) -> None:
    """Replace `path` by rename, fsynced: readers see the old file or the new one, never a part.

    The file keeps its mode and owner; a new file takes those of `like` (e.g. the config file
    it belongs with, which may hold credentials), else 0644. The temporary name starts with a
    dot and never ends like the target, so no `*.toml` or `*.json` glob picks it up.
    """
    directory = os.path.dirname(path) or "."
    try:
        previous: Optional[os.stat_result] = os.stat(path)
    except FileNotFoundError:
        previous = None
    descriptor, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        if previous is None and like is not None:
            try:
                previous = os.stat(like)
            except OSError:
                previous = None
        if previous is not None:
            os.chmod(temporary, previous.st_mode & 0o7777)
            os.chown(temporary, previous.st_uid, previous.st_gid)
        else:
            os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    directory_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


# ---------------------------------------------------------------------------- what every runtime module shares

BACKUP_SUFFIX = ".gcu-stack-backup"  # beside the config file: the original, so a crash between steps is recoverable


class Refused(Exception):
    """The host's config is unusable; nothing was written."""


class RolledBack(Exception):
    """The runtime did not take the change; the previous files were put back."""


def cli(description: str, env_prefix: str, paths: tuple = ()) -> argparse.ArgumentParser:
    """The command line both runtime modules share: the action, and what says which node, runtime and state;
    `paths`: the module's own (flag, environment variable, default) rows."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("activate", "restore", "inspect"))
    parser.add_argument("--runtime-path", default=os.environ.get("ENFLAME_RUNTIME_PATH"))
    parser.add_argument("--state-json", help="restore, inspect: the state printed by activate")
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", socket.gethostname()))
    parser.add_argument("--restart-command", default=os.environ.get(f"{env_prefix}_RESTART_COMMAND"))
    for flag, variable, default in paths:
        parser.add_argument(flag, default=os.environ.get(variable, default))
    return parser


def settings_from(args: argparse.Namespace, settings_class, **overrides):
    """A runtime module's settings dataclass from its command line: each field from the option of the same
    name (--config-toml → config_toml), the node as the label, --restart-command split (or the default)."""
    import dataclasses
    import shlex

    defaults = settings_class()
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(settings_class) if hasattr(args, f.name)}
    values["label"] = args.node
    values["restart_command"] = shlex.split(args.restart_command) if args.restart_command else list(defaults.restart_command)
    return settings_class(**{**values, **overrides})


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, module, host) -> int:
    """Run the chosen action of a runtime module (its activate, restore and inspect) on `host`; the result
    (or `{"error": ...}` and exit code 1) as the last line of output."""
    if args.action == "activate" and not args.runtime_path:
        parser.error("activate needs --runtime-path (or ENFLAME_RUNTIME_PATH)")
    state = json.loads(args.state_json or "{}")
    actions = {
        "activate": lambda: module.activate(host, args.runtime_path, args.mode),
        "restore": lambda: module.restore(host, state, args.mode),
        "inspect": lambda: module.inspect(host, state, args.runtime_path, args.mode),
    }
    try:
        result = actions[args.action]()
    except (Refused, RolledBack) as error:
        print(json.dumps({"error": str(error)}))
        return 1
    print(json.dumps(result))
    return 0
