"""Long-running changes (Upgrade, Delete): one per stack at a time, their progress, kept across restarts.

An operation runs on a thread of its own and holds the stack's run lock (stackops.locks.run_lock_path, the flock
`scripts/gcu-stack` takes too), so a CLI command and the service never change one stack at once: the second is
refused at once, naming the first. Its progress comes from the engine's events as they arrive. Every operation is
written to `operations.json` in the service's state directory when it starts and ends; one the service was stopped
in the middle of is reported failed on the next start, with how to go on (never lost, never silently retried).
"""

from __future__ import annotations

import fcntl
import json
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from pulumi import automation as auto

from service.gum import GumError

DRIVER_ROLLOUT = "pulumi-python:dynamic/gcu:DriverUpgrade"
KEEP = 200  # operations kept in operations.json (the oldest finished ones go first)
MESSAGES = 40  # the last engine messages kept in an operation's progress
# Progress is written by the engine's event thread and read by requests: one lock for both (they are brief).
PROGRESS = threading.Lock()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Operation:
    id: str
    stack: str
    operation: str  # Upgrade | Delete
    request: dict
    who: str
    phase: str = "running"  # running | succeeded | failed
    startedAt: str = field(default_factory=now)
    finishedAt: Optional[str] = None
    error: Optional[str] = None
    summary: dict = field(default_factory=dict)  # resource changes by op, when finished
    done: dict = field(default_factory=dict)  # resources finished so far, by op
    inFlight: list = field(default_factory=list)  # URNs being changed now
    messages: list = field(default_factory=list)  # the engine's last info/warning lines
    outputs: dict = field(default_factory=dict)  # the stack's status outputs, when finished
    driverRolledOut: bool = False  # this operation ran a driver rollout (its outputs' reports are this run's)
    # The DriverUpgrade resources it ran ("driver-upgrade", a pool's "driver-upgrade-<pool>"): whose reports are this run's.
    driverRollouts: list[str] = field(default_factory=list)

    def public(self) -> dict:
        with PROGRESS:
            return asdict(self)

    def on_event(self, event: auto.EngineEvent) -> None:
        with PROGRESS:
            self._progress(event)

    def _progress(self, event: auto.EngineEvent) -> None:
        """Progress from the engine's events, as they arrive."""
        if event.resource_pre_event and event.resource_pre_event.metadata:
            meta = event.resource_pre_event.metadata
            if _op(meta.op) not in ("same", "read"):
                self.inFlight.append(meta.urn)
        outputs = event.res_outputs_event or event.res_op_failed_event
        if outputs is not None and getattr(outputs, "metadata", None):
            meta = outputs.metadata
            op = _op(meta.op)
            if op != "same":
                self.done[op] = self.done.get(op, 0) + 1
                if meta.type == DRIVER_ROLLOUT and op in ("create", "update"):
                    self.driverRolledOut = True
                    self.driverRollouts.append(meta.urn.rsplit("::", 1)[-1])
            if meta.urn in self.inFlight:
                self.inFlight.remove(meta.urn)
        if event.diagnostic_event and event.diagnostic_event.severity in ("info", "warning", "error"):
            text = event.diagnostic_event.message.strip()
            if text:
                self.messages = (self.messages + [f"{event.diagnostic_event.severity}: {text}"])[-MESSAGES:]


def _op(op: Any) -> str:
    value = getattr(op, "value", op)
    return str(value).lower()


class Operations:
    """The service's operations, by id; at most one running per stack."""

    def __init__(self, state_dir: Path, run_lock: Callable[[str], Path], on_finish: Callable[[Operation, float], None]):
        self.path = state_dir / "operations.json"
        self.run_lock = run_lock
        self.on_finish = on_finish
        self.lock = threading.Lock()
        self.items: dict[str, Operation] = {}
        self.running: dict[str, str] = {}  # stack -> operation id
        self.threads: dict[str, threading.Thread] = {}
        self._load()

    def _load(self) -> None:
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            saved = []
        for item in saved:
            try:
                op = Operation(**item)
            except TypeError:
                continue
            if op.phase == "running":
                op.phase, op.finishedAt = "failed", now()
                op.error = (f"the service stopped while this {op.operation} ran (started {op.startedAt}); the stack is as "
                            "that run left it. Send the request again: an up resumes what was interrupted, and a lock "
                            "the stopped run left is cleared once its process is provably gone.")
            self.items[op.id] = op
        self._save()

    def _save(self) -> None:
        ordered = sorted(self.items.values(), key=lambda o: o.startedAt)
        keep = [o for o in ordered if o.phase == "running"] + [o for o in ordered if o.phase != "running"][-KEEP:]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        spare = self.path.with_suffix(".json.new")
        spare.write_text(json.dumps([o.public() for o in sorted(keep, key=lambda o: o.startedAt)], indent=1))
        spare.replace(self.path)

    def get(self, operation_id: str) -> Operation:
        with self.lock:
            op = self.items.get(operation_id)
        if op is None:
            raise GumError(404, f"no operation {operation_id!r} (the service keeps the last {KEEP})")
        return op

    def recent(self, stack: Optional[str] = None) -> list[Operation]:
        with self.lock:
            ops = [o for o in self.items.values() if stack is None or o.stack == stack]
        return sorted(ops, key=lambda o: o.startedAt, reverse=True)

    def start(self, stack: str, operation: str, request: dict, who: str, work: Callable[[Operation], dict]) -> Operation:
        """Start `work` on its own thread, holding the stack's run lock; 409 when the stack is being changed."""
        with self.lock:
            if stack in self.running:
                current = self.items[self.running[stack]]
                raise GumError(409, f"GcuResource {stack} is being changed by operation {current.id} ({current.operation}, "
                                    f"started {current.startedAt}): wait for it (GET /gum/v1/operations/{current.id})",
                               runningOperationId=current.id)
            lock_file = self.run_lock(stack)
            lock_file.parent.mkdir(parents=True, exist_ok=True)
            handle = open(lock_file, "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another gcu-stack command"
                handle.close()
                raise GumError(409, f"GcuResource {stack} is being changed right now by {holder}: nothing was started; "
                                    "send the request again when it has finished") from None
            op = Operation(id=uuid.uuid4().hex[:16], stack=stack, operation=operation, request=request, who=who)
            handle.seek(0)
            handle.truncate()
            handle.write(f"the gcu-stack service's operation {op.id} ({operation}, started {op.startedAt})")
            handle.flush()
            self.items[op.id] = op
            self.running[stack] = op.id
            self._save()
        thread = threading.Thread(target=self._run, args=(op, work, handle), name=f"op-{op.id}", daemon=True)
        self.threads[op.id] = thread
        thread.start()
        return op

    def _run(self, op: Operation, work: Callable[[Operation], dict], handle) -> None:
        started = time.monotonic()
        try:
            result = work(op) or {}
            op.summary = result.get("summary") or {}
            op.outputs = result.get("outputs") or {}
            op.phase = "succeeded"
        except GumError as error:
            op.phase, op.error = "failed", error.message
        except auto.CommandError as error:
            op.phase, op.error = "failed", command_error(error)
        except Exception as error:  # noqa: BLE001 - an operation reports every failure, never dies silently
            op.phase, op.error = "failed", f"{type(error).__name__}: {error}"
        finally:
            op.finishedAt = now()
            op.inFlight = []
            with self.lock:
                self.running.pop(op.stack, None)
                self._save()
            handle.close()  # releases the run lock
            self.on_finish(op, time.monotonic() - started)

    def wait(self, op: Operation, timeout: Optional[float] = None) -> Operation:
        thread = self.threads.get(op.id)
        if thread is not None:
            thread.join(timeout)
        return op


def command_error(error: auto.CommandError) -> str:
    """The useful part of a failed pulumi command: its error lines, not the whole transcript."""
    text = str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "error ", "  error")) or "error:" in line]
    picked = errors or lines[-8:]
    return " | ".join(dict.fromkeys(picked))[:4000]
