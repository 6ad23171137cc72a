"""A dynamic provider stops when the `pulumi up` that started it is killed.

Pulumi starts each plugin in a process group of its own, and the Python dynamic provider (`python -m pulumi.dynamic`,
behind a shell script that does not exec) serves until the engine stops it: after a SIGKILL of the CLI alone (a CI job's
timeout, the OOM killer, `kill -9 <pid>`) it would go on cordoning, evicting and restarting drivers with no engine to
record any of it. So the provider process watches its engine: the address Pulumi gives every plugin as its last
argument. Once that address refuses connections a few times in a row, the process exits at once, exactly as if it had
been killed with the CLI; every mutating step is written to be resumed from there by the next `pulumi up`.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Optional

WATCH_THREAD = "gcu-stack-engine-watch"  # one per process, found by name (the provider holds no globals)
DYNAMIC_PROVIDER_MAIN = "pulumi.dynamic.__main__"
EXIT_ENGINE_GONE = 75  # EX_TEMPFAIL: the next `pulumi up` carries on


def engine_address(argv: list[str]) -> Optional[tuple[str, int]]:
    """host:port among a plugin's arguments (the last one that is not a flag), or None."""
    for arg in reversed(argv[1:]):
        if arg.startswith("-"):
            continue
        host, sep, port = arg.rpartition(":")
        if sep and host and port.isdigit():
            return host.strip("[]"), int(port)
        return None
    return None


def engine_answers(address: tuple[str, int], timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def in_dynamic_provider() -> bool:
    """This process is Pulumi's Python dynamic provider (not a test or the program calling a provider in-process)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == DYNAMIC_PROVIDER_MAIN


def watch_engine(argv: Optional[list[str]] = None, *, interval: float = 1.0, misses: int = 3,
                 exit_process: Callable[[int], Any] = os._exit) -> bool:
    """Start this process's engine watch unless it runs; True if one runs now. `argv` given: watch regardless of what
    process this is (tests)."""
    if argv is None:
        if not in_dynamic_provider():
            return False
        argv = sys.argv
    address = engine_address(argv)
    if address is None:
        return False
    if any(thread.name == WATCH_THREAD for thread in threading.enumerate()):
        return True

    def watch() -> None:
        missed = 0
        while True:
            time.sleep(interval)
            missed = 0 if engine_answers(address) else missed + 1
            if missed >= misses:
                try:  # stderr is a pipe to the dead CLI: the message is for a watched process's own reader (tests)
                    print(f"gcu-stack: the Pulumi engine at {address[0]}:{address[1]} is gone (its `pulumi up` was "
                          "killed); this provider stops here and the next `pulumi up` carries on", file=sys.stderr, flush=True)
                except OSError:
                    pass
                finally:
                    exit_process(EXIT_ENGINE_GONE)
                return

    threading.Thread(target=watch, name=WATCH_THREAD, daemon=True).start()
    return True


def engine_watched(method: Callable) -> Callable:
    """A provider method that changes the cluster: the engine watch runs while it does."""

    @functools.wraps(method)
    def watched(*args: Any, **kwargs: Any) -> Any:
        watch_engine()
        return method(*args, **kwargs)

    return watched
