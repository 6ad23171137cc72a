"""The metadata sidecars of a file backend, which a killed command can leave unreadable.

Pulumi's file backend (gocloud.dev/blob/fileblob) writes each object atomically (a temporary file renamed over it),
but writes the object's `<name>.attrs` sidecar (content type, MD5) in place. A command killed between creating the
sidecar and writing it leaves it empty, and from then on every read of the object fails with a bare "EOF": the stack's
checkpoint (`pulumi stack export`, `up`, `destroy`: "failed to load checkpoint: EOF") becomes unreadable although the
checkpoint itself is intact. fileblob reads an object without its sidecar (it is optional), so an unreadable sidecar
is moved aside: nothing of the stack's state is in it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

SUFFIX = ".attrs"


def unreadable(backend_root: Path) -> list[Path]:
    """The sidecars under the backend's .pulumi that fileblob could not read (empty or cut short)."""
    found = []
    for path in sorted((backend_root / ".pulumi").rglob(f"*{SUFFIX}")):
        try:
            json.loads(path.read_bytes())
        except (ValueError, OSError):
            found.append(path)
    return found


def set_aside(paths: list[Path], backend_root: Path, backup_dir: Path) -> list[tuple[Path, Path]]:
    """Move each unreadable sidecar to backup_dir (kept for inspection); (where it was, where it went)."""
    moved = []
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path in paths:
        backup_dir.mkdir(parents=True, exist_ok=True)
        target = backup_dir / f"{stamp}-{'_'.join(path.relative_to(backend_root).parts)}"
        path.replace(target)
        moved.append((path, target))
    return moved
