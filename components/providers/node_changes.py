"""Wake a driver rollout's waits when something on a node changes, rather than after a fixed poll.

A rollout waits on many conditions (pods evicted, a driver pod Ready, agents back, a taint lifted); each is
checked again as soon as the API server reports a change to a pod on that node or to the node itself. The
watches only wake the checks: every check still reads the API, and still runs at least every poll interval,
so a watch that breaks or lags makes the rollout no slower than polling, never wrong.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Optional

WATCH_SECONDS = 60      # each watch request's server-side timeout; it is then opened again from where it was
RETRY_SECONDS = 1.0     # after a failed watch request


def _pod_node(obj: dict) -> Optional[str]:
    return (obj.get("spec") or {}).get("nodeName")


def _node_name(obj: dict) -> Optional[str]:
    return (obj.get("metadata") or {}).get("name")


class NodeChanges:
    """Watches pods and nodes while open. `seen(node)` is a count of the changes on `node` so far; `wait(node, seen,
    timeout)` returns once that count moved past `seen` (or `timeout` passed, or it is closed). Taking `seen` before
    checking a condition means a change in between is never missed."""

    def __init__(self, api: Any):
        self._api = api
        self._changed = threading.Condition()
        self._counts: dict[Optional[str], int] = {}
        self._closed = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch, args=(api.list_pod_for_all_namespaces, _pod_node), daemon=True,
                             name="rollout-watch-pods"),
            threading.Thread(target=self._watch, args=(api.list_node, _node_name), daemon=True, name="rollout-watch-nodes"),
        ]

    def __enter__(self) -> "NodeChanges":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        with self._changed:
            self._changed.notify_all()
        # The threads end at their watch's next event or timeout; they hold nothing the rollout needs.

    def seen(self, node: Optional[str]) -> int:
        """Changes so far on `node` (None: on any node)."""
        with self._changed:
            return self._counts.get(node, 0)

    def wait(self, node: Optional[str], seen: int, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._counts.get(node, 0) != seen or self._closed.is_set(), timeout)

    def _note(self, node: Optional[str]) -> None:
        with self._changed:
            for key in {node, None}:
                self._counts[key] = self._counts.get(key, 0) + 1
            self._changed.notify_all()

    def _watch(self, list_call: Callable[..., Any], node_of: Callable[[dict], Optional[str]]) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        version: Optional[str] = None
        while not self._closed.is_set():
            try:
                if version is None:   # start from now: what is already there is what the first check reads
                    version = json.loads(list_call(limit=1, _preload_content=False).data)["metadata"]["resourceVersion"]
                stream = watch.Watch()
                for event in stream.stream(list_call, resource_version=version, timeout_seconds=WATCH_SECONDS,
                                           allow_watch_bookmarks=True, deserialize=False,
                                           _request_timeout=WATCH_SECONDS + 10):
                    obj = event.get("object") or {}
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") != "BOOKMARK":
                        self._note(node_of(obj))
                    if self._closed.is_set():
                        stream.stop()
                        break
            except ApiException as error:
                if error.status == 410:   # too old to resume: start again from now
                    version = None
                else:
                    self._closed.wait(RETRY_SECONDS)
            except Exception:  # noqa: BLE001 - a dropped connection: the checks go on polling meanwhile
                version = None
                self._closed.wait(RETRY_SECONDS)
