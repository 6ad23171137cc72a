"""The operations log: one JSON object a line for every request and every change, in gum's op-log directory.

gum wrote free text to `/topsdata/dcp/gcu-upgrade-manager/op-log/gcu-upgrade-manager.log`; the same file now holds
JSON lines (`time`, `event`, `who`, and what the event is about), which `jq` reads and log shippers parse.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FILE_NAME = "gcu-upgrade-manager.log"


class OpLog:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / FILE_NAME
        self.lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        record = {"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), "event": event, **fields}
        # ASCII only: a path or header may carry U+2028 and the like, which line-splitting tools take for a newline.
        line = json.dumps(record, default=str)
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(line + "\n")
