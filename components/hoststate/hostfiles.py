"""Files on a node, changed so that a crash never leaves half a file: shared by the runtime modules.

Standard library only: it runs in the provider, in the activation pod and in the toolkit image.
"""

from __future__ import annotations

import base64
import os
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
