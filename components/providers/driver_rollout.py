"""DriverUpgrade (pulumi-python:dynamic/gcu:DriverUpgrade): the GCU driver rolled out node by node, never
under a running GCU job.

The driver DaemonSet is `OnDelete`: changing it only records a new revision. This resource
then upgrades every GCU node whose driver pod is not at that revision, up to maxParallel at once (a node
starting as soon as one before it finishes):

    upgrade-required → cordoned → (wait for jobs) → evicting → restarting-driver → validating → done
                                                                                 (or failed)

per node: cordon (remembering whether it already was), wait for pods matching
`waitForCompletion`, evict every pod that requests a GCU resource through the Eviction API
(PodDisruptionBudgets honoured; optionally drain when that does not finish in time), pause the
GCU operands on the node through their deploy label (`paused-for-driver-upgrade`, excluded by
their DaemonSets' node affinity), delete the driver pod and wait for the new one to be Ready
(Ready means "the right version is loaded"), restore the operand labels and wait for their
pods, validate the node, uncordon. The state is on the node (`enflame.com/gcu.driver-upgrade-state`,
a reason annotation when it failed). A failure stops the rollout (the nodes under way finish, no other starts) with
the node cordoned; the next update resumes and skips finished nodes. Delete leaves no cordon,
label, annotation or taint of gcu-stack's behind.

Each GCU job is moved at most once: nodes without GCU pods go first, so the first evicted jobs
have upgraded nodes to land on, and while the rollout runs every node still to be upgraded
carries our `PreferNoSchedule` taint, so the scheduler places an evicted job on an upgraded
node when one has room. The taint goes when the node is done, when the rollout stops, on
delete, and at the next rollout after an interrupted one.

Before the first cordon, every node of the full path pulls the new revision's images while it still serves jobs
(components/providers/driver_prepull.py): no node waits for a pull while cordoned, and an image that cannot be pulled
stops the rollout before anything is cordoned or evicted.

A change that leaves what the driver installs as it was (components/providers/install_key.py: labels,
resources, tolerations, pull policy...) takes the restart-only path: the node's driver pod is
replaced, finds its version loaded and does nothing, with no cordon, eviction or taint. Those
nodes go first, in batches of maxUnavailable (or maxParallel, if larger), as they stay available.

With `rollback` (the setting onFailure: rollback), a node whose new driver fails (it never gets Ready,
its agents do not come back, or validation fails) gets the driver it had back: the DaemonSet is held
off the node through its deploy label, a pod of the previous revision is pinned to it, its agents
return, it is validated and uncordoned, in state `rolled-back`; the rollout stops there. The next
rollout retries that node first, releasing the pinned pod and the label.

With node pools (spec.driver.pools; the `pool` input) there is one DaemonSet and one DriverUpgrade per pool, each over
the GCU nodes its pool selects. A node runs a pool's DaemonSet only once it carries that pool's DRIVER_POOL_LABEL, and
a rollout sets it on the full path: after eviction and the pause, every driver DaemonSet is held off the node (its
deploy label) until no driver pod is left, then the node takes the label and its new pool's driver starts. So a pool
added, a node relabelled or one that joined later never has its driver swapped under a job.

With maintenance windows (`windows`, components/providers/windows.py) or `maxDurationMinutes`,
a node starts only inside a window and within that duration of the rollout's start; those under
way finish. The rest waits, untouched and without our taint: `pulumi up`
succeeds saying when the next window opens, and the next `up` continues.

`plan()` is pure: the preview prints it, the rollout follows its order. Each wait of a node's upgrade is woken by a
watch of the node and its pods (components/providers/node_changes.py), and checks again at least every second.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from ..names import DEPLOY_LABEL_PREFIX, DRIVER_POOL_LABEL, PART_OF, PART_OF_LABEL, PAUSED_FOR_DRIVER_UPGRADE, REVISION_LABEL, label_value
from .bundled import Bundled, bundled_diff, changed_inputs, engine_log, inputs_of
from .cluster import ClusterMismatch, checked_api
from .driver_prepull import delete_prepull_pods, pull_first
from .driver_prepull import selector as prepull_selector
from .engine_watch import engine_watched
from .install_key import install_key
from .node_changes import NodeChanges
from .windows import window_state

STATE_LABEL = "enflame.com/gcu.driver-upgrade-state"
SKIP_LABEL = "enflame.com/gcu.driver-upgrade.skip"
REASON_ANNOTATION = "enflame.com/gcu.driver-upgrade-reason"
# What gcu-stack changed on a node, so that it puts back exactly that.
CORDONED_ANNOTATION = "gcu-stack.enflame.com/driver-upgrade-cordoned"
PAUSED_ANNOTATION = "gcu-stack.enflame.com/driver-upgrade-paused"
PAUSED = PAUSED_FOR_DRIVER_UPGRADE
# Soft: the scheduler prefers other nodes for new pods, nothing running is affected.
PENDING_TAINT = {"key": "gcu-stack.enflame.com/driver-upgrade-pending", "value": "true", "effect": "PreferNoSchedule"}
UPGRADE_REQUIRED, CORDONED, WAITING, EVICTING, RESTARTING, VALIDATING, DONE, FAILED = (
    "upgrade-required", "cordoned", "waiting-for-jobs", "evicting", "restarting-driver", "validating", "done", "failed",
)
RESTART_REQUIRED = "restart-required"   # the restart-only path's first state
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"   # the node controller's mirror of a cordon
UNCORDON_SETTLE_SECONDS = 60.0
ROLLING_BACK, ROLLED_BACK = "rolling-back", "rolled-back"
# On a rolled-back node: the revision it runs again and its driver deploy label's value before, put back when the node
# is retried or the resource deleted.
ROLLBACK_ANNOTATION = "gcu-stack.enflame.com/driver-rollback"
ROLLBACK_POD_LABEL = "gcu-stack.enflame.com/driver-rollback-of"   # the node a pinned previous-driver pod serves
# On a node moving into another driver pool while every driver DaemonSet is held off it: its driver deploy label's value
# before, put back once the old driver pod is gone (or when the resource is deleted).
MOVE_ANNOTATION = "gcu-stack.enflame.com/driver-pool-move"
# The steps after the new driver pod is in place: a failure there is the new driver's, and a rollback undoes it.
AFTER_THE_NEW_DRIVER = ("restart driver", "restore operands", "validate")
TAINT_WORKERS = 8   # nodes whose pending taint is set or removed at once (each a read and a conditional patch)
POLL = 1.0   # the longest a wait goes without checking again: a watched change on the node wakes it sooner


class NodeFailed(Exception):
    """One node's upgrade stopped; it stays cordoned, in state `failed`, with the reason annotated."""

    def __init__(self, node: str, step: str, message: str):
        super().__init__(f"{node}: {step}: {message}")
        self.node, self.step, self.message = node, step, message


class RolledBack(NodeFailed):
    """One node's new driver failed and the node was rolled back to the driver it had: it serves jobs again."""

    def __init__(self, failure: NodeFailed, revision: str):
        super().__init__(failure.node, failure.step, failure.message)
        self.revision = revision


class NodeLeft(NodeFailed):
    """The node left the cluster during its upgrade: nothing is left to upgrade there; the rollout goes on."""

    def __init__(self, node: str, step: str):
        super().__init__(node, step, "the node left the cluster")


LEFT = "left the cluster during the upgrade"


def selector_text(match_labels: dict) -> str:
    """A DaemonSet's matchLabels as a label selector string."""
    return ",".join(f"{k}={v}" for k, v in match_labels.items())


def in_pool(labels: dict, pool: Optional[dict]) -> bool:
    """Whether a node with these labels is one the DaemonSet of `pool` (DriverUpgradeInputs.pool) runs on."""
    def matches(selector: dict) -> bool:
        return all(labels.get(key) == value for key, value in selector.items())

    return not pool or (matches(pool.get("nodeSelector") or {}) and not any(matches(s) for s in pool.get("otherPools") or []))


def not_ready(node: dict) -> Optional[str]:
    """Why a node is not Ready (its Ready condition's reason and message), or None when it is."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return None
            return f"{condition.get('reason') or 'NotReady'}: {condition.get('message') or 'no message'}".strip()
    return "no Ready condition reported"


# ---------------------------------------------------------------------------- inputs


@dataclass
class DriverUpgradeInputs:
    """Every input of a DriverUpgrade resource, under its property name."""

    daemonSet: str  # the driver DaemonSet
    namespace: str
    template: str  # a hash of its pod template: a new one means a rollout
    image: Any  # the driver image the new revision runs (for the plan and the messages)
    nodes: Any  # the GCU nodes (GcuNodes)
    operands: list[str]  # node agents paused while the driver is replaced (their deploy-label keys)
    resources: list[str]  # extended resources: pods requesting one are moved off first
    maxParallel: int
    maxUnavailable: str  # "25%" or a count; nodes already unschedulable count
    waitForCompletion: dict  # {"selector": "k=v,...", "timeoutSeconds": n}; selector "" waits for nothing
    evictionTimeoutSeconds: int
    drain: dict  # {"enabled": bool, "timeoutSeconds": n}: delete what eviction could not move (PDBs overridden)
    driverReadyTimeoutSeconds: int
    operandReadyTimeoutSeconds: int
    validation: Optional[dict]  # the GcuValidation inputs, when the stack validates; None: no validation
    kubeconfig: Any = None
    context: Optional[str] = None
    clusterUid: Any = None  # the stack's cluster (ClusterGuard's kube-system UID): any other is refused
    windows: Optional[list] = None  # maintenance windows ({days, start, end, timeZone}); None: any time
    maxDurationMinutes: Optional[int] = None  # no wave starts later in a rollout; None: no limit
    rollback: Optional[dict] = None  # {"holdLabel": the driver DaemonSet's deploy label}: roll failed nodes back; None: halt
    # A DaemonSet of a node pool (spec.driver.pools) covers the GCU nodes its "nodeSelector" matches and no selector of
    # "otherPools" does (the component's own DaemonSet: "name" "", an empty nodeSelector and every pool's). A node
    # whose DRIVER_POOL_LABEL is not "name" moves in: "holdLabel" holds every driver DaemonSet off it until no pod of
    # "driverPods" (a label selector) is left there. None: every GCU node, no moves.
    pool: Optional[dict] = None


INPUTS = tuple(DriverUpgradeInputs.__dataclass_fields__)
OUTPUTS = ("revision", "states", "skipped", "upgraded", "restarted", "failed", "rolledBack", "paused", "mostUnavailable", "message",
           "finishedAt", "reports")


# ---------------------------------------------------------------------------- the plan (pure)


@dataclass
class NodeFacts:
    """What the plan needs to know about one GCU node."""

    name: str
    unschedulable: bool = False
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    driver_revision: Optional[str] = None  # its driver pod's revision; None: no driver pod there
    gcu_pods: list = field(default_factory=list)  # "namespace/name" of pods requesting a GCU resource
    pending_taint: bool = False  # carries PENDING_TAINT
    same_install: bool = False  # its driver pod installs what the target revision does (install_key): a restart will do
    # The pool whose driver it runs now ("": the component's own) when the rollout moves it into its own pool; else None.
    moving_from: Optional[str] = None


@dataclass
class RolloutPlan:
    revision: str
    waves: list  # [[node, ...], ...]: the full path (cordon, evict, replace the driver, validate, uncordon)
    restarts: list  # [[node, ...], ...]: the driver pod replaced only (what it installs is unchanged)
    skipped: dict  # node -> why
    current: list  # nodes already at the revision (and not failed)
    evictions: dict  # node -> ["namespace/pod", ...]
    total: int  # GCU nodes
    budget: int  # nodes that may be unavailable at once (maxUnavailable)
    already: int  # nodes unschedulable before the rollout (not by gcu-stack)
    most_unavailable: int
    retried: dict = field(default_factory=dict)  # node -> why an earlier rollout failed or rolled it back
    parallel: int = 1  # nodes on the full path at once (maxParallel)
    room: int = 1  # of those, nodes the rollout itself may make unavailable at once (the budget left)
    free: frozenset = frozenset()  # nodes to upgrade that were unschedulable already: they take no room
    batch: int = 1  # restart-only nodes at once
    moves: dict = field(default_factory=dict)  # node -> the pool whose driver it leaves ("": the component's own)

    @property
    def nodes(self) -> list[str]:
        return [n for wave in self.waves for n in wave]


def unavailable_budget(max_unavailable: Any, total: int) -> int:
    """maxUnavailable as a node count: "25%" of the GCU nodes (rounded down, at least 1) or a number."""
    text = str(max_unavailable).strip()
    if text.endswith("%"):
        return max(1, math.floor(total * float(text[:-1]) / 100))
    return max(1, int(text))


def ours_cordoned(facts: NodeFacts) -> bool:
    return facts.annotations.get(CORDONED_ANNOTATION) == "true"


def rollback_hold(annotations: dict) -> Optional[dict]:
    """What a rollback recorded on a node (its driver deploy label's `label` and earlier `value`, the `revision` it runs
    again); None when the node is not rolled back."""
    raw = annotations.get(ROLLBACK_ANNOTATION)
    return json.loads(raw) if raw is not None else None


def rolled_back(facts: NodeFacts) -> bool:
    return ROLLBACK_ANNOTATION in facts.annotations


def previous_revision(facts: NodeFacts) -> Optional[str]:
    """The revision a rollback puts back: the one a rolled-back node runs again, else its driver pod's."""
    held = rollback_hold(facts.annotations)
    return held.get("revision") if held else facts.driver_revision


def full_path_begun(facts: NodeFacts) -> bool:
    """An interrupted rollout cordoned the node or paused its agents: only the full path puts that back."""
    return ours_cordoned(facts) or PAUSED_ANNOTATION in facts.annotations


def plan(facts: list[NodeFacts], revision: str, max_parallel: int, max_unavailable: Any) -> RolloutPlan:
    """Which nodes to upgrade, in which waves, moving which pods; which only restart their driver pod; which are
    skipped and why."""
    nodes = sorted(facts, key=lambda f: f.name)
    skipped, current, todo, restarts = {}, [], [], []
    for node in nodes:
        if node.labels.get(SKIP_LABEL) == "true":
            skipped[node.name] = f"label {SKIP_LABEL}=true"
        elif node.moving_from is not None:
            todo.append(node)   # into this rollout's pool: the full path, whatever its driver pod is now
        elif node.driver_revision is None and node.labels.get(STATE_LABEL) in (None, DONE):
            # A node a rollout is still at (e.g. failed with its old pod deleted) is finished, not skipped: its new
            # pod may simply not be there yet.
            skipped[node.name] = "no driver pod on the node (its nodeSelector or an opt-out label keeps it off)"
        elif node.driver_revision == revision and node.labels.get(STATE_LABEL) in (None, DONE):
            current.append(node.name)
        elif full_path_begun(node) or node.labels.get(STATE_LABEL) == FAILED:
            todo.append(node)   # resumed on the full path, even when its new driver pod is already there
        elif node.same_install or node.driver_revision == revision:
            # Nothing installed changes, or a restart-only pass stopped after replacing the pod: a restart finishes it.
            restarts.append(node.name)
        else:
            todo.append(node)
    # A node cordoned by someone else is unavailable already; one cordoned by an interrupted rollout is ours.
    already = sum(1 for n in nodes if n.unschedulable and not ours_cordoned(n))
    budget = unavailable_budget(max_unavailable, len(nodes))
    # Resume first what an interrupted rollout left cordoned or rolled back, then nodes without GCU pods (the jobs
    # evicted later then have upgraded nodes to go to), then the rest; by name within each.
    todo.sort(key=lambda n: (not (ours_cordoned(n) or rolled_back(n)), bool(n.gcu_pods), n.name))
    parallel, room = max(1, max_parallel), max(budget - already, 1)
    free = frozenset(n.name for n in todo if n.unschedulable and not ours_cordoned(n))   # they add nothing unavailable
    waves: list[list[str]] = []
    wave: list[str] = []
    adds = 0  # nodes this wave makes unavailable
    for node in todo:
        adding = 0 if node.name in free else 1
        if wave and (len(wave) >= parallel or (adding and adds + adding > room)):
            waves.append(wave)
            wave, adds = [], 0
        wave.append(node.name)
        adds += adding
    if wave:
        waves.append(wave)
    # Nodes start as others finish (not wave by wave): at worst every slot holds a node the rollout makes unavailable.
    most = already + min(parallel, room, len(todo) - len(free))
    # The restart-only nodes stay available; a batch's size still bounds what a bad template could break at once.
    batch = max(budget, max_parallel, 1)
    return RolloutPlan(
        revision=revision,
        waves=waves,
        restarts=[restarts[i:i + batch] for i in range(0, len(restarts), batch)],
        skipped=skipped,
        current=current,
        evictions={n.name: sorted(n.gcu_pods) for n in todo},
        total=len(nodes),
        budget=budget,
        already=already,
        most_unavailable=most,
        retried={n.name: f"{'rolled back after' if rolled_back(n) else 'failed at'} {n.annotations.get(REASON_ANNOTATION) or 'an earlier rollout'}"
                 for n in todo if n.labels.get(STATE_LABEL) in (FAILED, ROLLED_BACK)},
        parallel=parallel,
        room=room,
        free=free,
        moves={n.name: n.moving_from for n in todo if n.moving_from is not None},
        batch=batch,
    )


def describe(plan_: RolloutPlan, image: str, old_images: list[str], max_parallel: int, max_unavailable: Any,
             schedule: Optional[str] = None) -> list[str]:
    """The plan as the preview prints it, one line each; `schedule`: when its waves may start (windows_note)."""
    lines = []
    if not plan_.waves and not plan_.restarts:
        lines.append(f"driver: all {len(plan_.current)} GCU node(s) run the current driver; nothing to upgrade")
    if plan_.restarts:
        restarted = [n for batch in plan_.restarts for n in batch]
        lines.append(f"driver restart only: {len(restarted)} of {plan_.total} GCU node(s), in {len(plan_.restarts)} batch(es): "
                     "what the driver installs is unchanged, so each node's driver pod is replaced with no cordon and no eviction:")
        lines.extend(f"  batch {i}: {', '.join(batch)}" for i, batch in enumerate(plan_.restarts, 1))
    if plan_.waves:
        before = ", ".join(sorted(set(old_images))) or "the running driver"
        lines.append(f"driver upgrade planned: {before} → {image}, {len(plan_.nodes)} of {plan_.total} GCU node(s), in {len(plan_.waves)} wave(s):")
        for i, wave in enumerate(plan_.waves, 1):
            parts = []
            for node in wave:
                pods = plan_.evictions.get(node) or []
                move = (f"moves from pool {plan_.moves[node]}'s driver; " if plan_.moves[node] else "moves from the own driver; ") \
                    if node in plan_.moves else ""
                parts.append(f"{node} ({move}evicts {', '.join(pods)})" if pods else f"{node} ({move}no GCU pod to evict)")
            lines.append(f"  wave {i}: " + "; ".join(parts))
        if len(plan_.waves) > 1:   # maxParallel, or less: the budget (nodes unschedulable before take none of it)
            at_once = min(plan_.parallel, plan_.room + len(plan_.free))
            lines.append(f"  up to {at_once} node(s) at once, in this order: each starts as soon as one before it "
                         "finishes, not when its whole wave has")
        for node, why in sorted(plan_.retried.items()):
            lines.append(f"  retried: {node} ({why})")
        lines.append("  first, before any cordon, each of those nodes pulls the new driver's images (a pod of the new revision "
                     "pinned to it); an image error stops the upgrade there")
        lines.append(f"  until its wave, each node carries the taint {PENDING_TAINT['key']}:{PENDING_TAINT['effect']}, "
                     "so evicted jobs go to upgraded nodes")
    if schedule and (plan_.waves or plan_.restarts):
        lines.append(f"  {schedule}")
    for node, why in sorted(plan_.skipped.items()):
        lines.append(f"  skipped: {node}: {why}")
    lines.append(
        f"  at most {plan_.most_unavailable} of {plan_.total} GCU node(s) unavailable at once "
        f"({plan_.already} already unschedulable; maxParallel {max_parallel}, maxUnavailable {max_unavailable} = {plan_.budget})"
    )
    return lines


def windows_note(windows: Optional[list], max_minutes: Optional[int], now: Optional[datetime] = None) -> Optional[str]:
    """When the waves may start, for the preview: None without windows or a duration limit."""
    if not windows and not max_minutes:
        return None
    limit = f"; none starts more than {max_minutes} minute(s) into the rollout" if max_minutes else ""
    state = window_state(windows or [], now or datetime.now(timezone.utc))
    if state.open:
        return f"waves start now: {state.describe()}{limit}" if windows else f"waves start now{limit}"
    return f"no wave starts now: {state.describe()}; `pulumi up` then does the rest and the next one in a window continues"


def wave_gate(props: dict, started: float, now: Callable[[], float] = time.time) -> Optional[str]:
    """Why no further wave may start (a closed window, the rollout's maxDurationMinutes spent); None: it may."""
    minutes = props.get("maxDurationMinutes")
    if minutes and now() - started >= float(minutes) * 60:
        return f"maxDurationMinutes ({minutes:g}) reached"
    state = window_state(props.get("windows") or [], datetime.fromtimestamp(now(), timezone.utc))
    return None if state.open else state.describe()


# ---------------------------------------------------------------------------- the cluster


def requests_gcu(pod: dict, resources: list[str]) -> bool:
    for container in (pod.get("spec") or {}).get("containers") or []:
        wanted = (container.get("resources") or {})
        if any(r in (wanted.get("limits") or {}) or r in (wanted.get("requests") or {}) for r in resources):
            return True
    return False


def _daemonset_pod(pod: dict) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in (pod["metadata"].get("ownerReferences") or []))


def _has_taint(node: dict, key: str) -> bool:
    return any(t.get("key") == key for t in (node.get("spec") or {}).get("taints") or [])


def _has_pending_taint(node: dict) -> bool:
    return _has_taint(node, PENDING_TAINT["key"])


def _ours(pod: dict) -> bool:
    return (pod["metadata"].get("labels") or {}).get(PART_OF_LABEL) == PART_OF


def _live(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions) and not pod["metadata"].get("deletionTimestamp")


class Cluster:
    """The API calls of an upgrade, from the resource's properties (no client kept between calls)."""

    def __init__(self, props: dict, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        from kubernetes import client

        self.api = checked_api(props)
        self.apps = client.AppsV1Api(self.api.api_client)
        self.props = props
        self.sleep, self.clock = sleep, clock
        self.changes: Optional[NodeChanges] = None   # while a rollout runs: waits wake on changes, not a fixed poll
        # The DaemonSet's pod selector (immutable in apps/v1): given by a preview that has the manifest, else read once.
        self._driver_selector: Optional[str] = props.get("driverSelector")

    def seen(self, node: Optional[str]) -> int:
        """A mark to pass to `until_changed`, taken before checking a condition on `node` (None: any node)."""
        return self.changes.seen(node) if self.changes else 0

    def until_changed(self, node: Optional[str], seen: int, timeout: float) -> None:
        """Return once something on `node` changed after `seen` was taken, or after `timeout`."""
        if self.changes:
            self.changes.wait(node, seen, timeout)
        else:
            self.sleep(timeout)

    @staticmethod
    def _data(response: Any) -> dict:
        return json.loads(response.data)

    def node(self, name: str) -> Optional[dict]:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._data(self.api.read_node(name, _preload_content=False))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def pool_nodes(self, names: list, taken: bool = False) -> list[str]:
        """Of the GCU nodes `names`, the ones this rollout's pool covers (all of them without pools), sorted; `taken`:
        and those carrying its pool label (a pool's, moved in earlier)."""
        pool = self.props.get("pool")
        if not pool:
            return sorted(set(names))
        labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {}
                  for n in self._data(self.api.list_node(_preload_content=False))["items"]}
        return sorted(n for n in set(names) if n in labels and (
            in_pool(labels[n], pool) or (taken and pool["name"] and labels[n].get(DRIVER_POOL_LABEL) == pool["name"])))

    def patch_node(self, name: str, patch: dict) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.patch_node(name, patch, _content_type="application/merge-patch+json", _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                raise NodeLeft(name, "node") from None
            raise

    def set_pending_taint(self, name: str, present: bool) -> None:
        """Add or remove PENDING_TAINT. Conditional on the node's resourceVersion: a taint someone else adds
        meanwhile is never overwritten (a merge patch replaces the whole list)."""
        from kubernetes.client.exceptions import ApiException

        for _ in range(10):
            node = self.node(name)
            if node is None:
                return
            if _has_pending_taint(node) == present:
                return
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if t.get("key") != PENDING_TAINT["key"]] + ([PENDING_TAINT] if present else [])
            patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": kept or None}}
            try:
                self.api.patch_node(name, patch, _content_type="application/merge-patch+json", _preload_content=False)
                return
            except ApiException as error:
                if error.status == 404:
                    return
                if error.status != 409:
                    raise
        raise RuntimeError(f"node {name}: its taints kept changing; could not {'add' if present else 'remove'} "
                           f"{PENDING_TAINT['key']}")

    def pods_on(self, node: str, selector: str = "") -> list[dict]:
        return self._data(
            self.api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}", label_selector=selector or None, _preload_content=False)
        )["items"]

    def gcu_pods(self, node: str) -> list[dict]:
        """The pods on `node` that hold GCUs (gcu_job)."""
        return [p for p in self.pods_on(node) if self.gcu_job(p)]

    def gcu_job(self, pod: dict) -> bool:
        """Holds GCUs: running, requesting a GCU resource, neither a node agent nor one of gcu-stack's own short
        checks (a validation pod is no job to move, nor to order the waves by)."""
        return _live(pod) and not _daemonset_pod(pod) and not _ours(pod) and requests_gcu(pod, self.props["resources"])

    def daemonset(self) -> dict:
        p = self.props
        return self._data(self.apps.read_namespaced_daemon_set(p["daemonSet"], p["namespace"], _preload_content=False))

    def current_revision(self, timeout: float = 60.0) -> str:
        """The driver DaemonSet's newest revision hash, once the controller has recorded it."""
        p = self.props
        deadline = self.clock() + timeout
        while True:
            ds = self.daemonset()
            generation_seen = (ds.get("status") or {}).get("observedGeneration", 0) >= ds["metadata"].get("generation", 0)
            newest = self.newest_revision(ds)
            if generation_seen and newest:
                return newest
            if self.clock() > deadline:
                raise RuntimeError(f"DaemonSet {p['namespace']}/{p['daemonSet']}: the controller recorded no revision in {timeout:.0f}s")
            self.sleep(POLL / 10)   # the controller records it within moments of the DaemonSet's update

    def _revisions(self, ds: dict) -> list[dict]:
        revisions = self._data(self.apps.list_namespaced_controller_revision(ds["metadata"]["namespace"], _preload_content=False))["items"]
        return [r for r in revisions if any(o.get("uid") == ds["metadata"]["uid"] for o in r["metadata"].get("ownerReferences") or [])]

    def newest_revision(self, ds: dict) -> Optional[str]:
        """The revision hash of `ds`'s newest ControllerRevision; None before the controller recorded one."""
        owned = self._revisions(ds)
        return max(owned, key=lambda r: r.get("revision", 0))["metadata"]["labels"][REVISION_LABEL] if owned else None

    def install_keys(self) -> dict[str, str]:
        """What each revision of the driver DaemonSet installs (install_key), by revision hash."""
        return {r["metadata"]["labels"][REVISION_LABEL]: install_key(((r.get("data") or {}).get("spec") or {}).get("template") or {})
                for r in self._revisions(self.daemonset()) if REVISION_LABEL in (r["metadata"].get("labels") or {})}

    def driver_pods(self, node: Optional[str] = None) -> dict[str, dict]:
        """Driver pods by node (the newest on each node); only `node`'s when given (a node's waits ask often: one
        pod, not the whole DaemonSet's)."""
        if self._driver_selector is None:
            ds = self.daemonset()
            self._driver_selector = selector_text(ds["spec"]["selector"]["matchLabels"])
        pods = self._data(self.api.list_namespaced_pod(
            self.props["namespace"], label_selector=self._driver_selector,
            field_selector=f"spec.nodeName={node}" if node else None, _preload_content=False))["items"]
        found: dict[str, dict] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not pod["metadata"].get("deletionTimestamp"):
                found[node] = pod
        return found

    def rollback_pods(self, node: str) -> list[dict]:
        """The live pods of a previous driver revision pinned to `node` by a rollback."""
        selector = f"{ROLLBACK_POD_LABEL}={label_value(node)}"
        pods = self._data(self.api.list_namespaced_pod(self.props["namespace"], label_selector=selector, _preload_content=False))["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def create_rollback_pod(self, node: str, revision: str) -> None:
        """A pod of the driver DaemonSet's `revision` pinned to `node`. Not the DaemonSet's (without its selector's
        labels it is never adopted, nor replaced), and without its node affinity: the kubelet admits a pod only on a
        node its affinity matches, and the node's driver deploy label now keeps the DaemonSet off."""
        from kubernetes.client.exceptions import ApiException

        ds = self.daemonset()
        found = [r for r in self._revisions(ds) if (r["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
        if not found:
            raise RuntimeError(f"the driver DaemonSet no longer has revision {revision} to roll back to")
        template = json.loads(json.dumps(found[0]["data"]["spec"]["template"]))
        selector = set(ds["spec"]["selector"].get("matchLabels") or {})
        meta = template.get("metadata") or {}
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in selector}
        labels.update({ROLLBACK_POD_LABEL: label_value(node), REVISION_LABEL: revision, PART_OF_LABEL: PART_OF})
        spec = template["spec"]
        spec.pop("affinity", None)
        spec["nodeName"] = node
        spec["tolerations"] = [*(spec.get("tolerations") or []),
                               {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
        name = f"{ds['metadata']['name']}-rollback-{node}"
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
            "name": name if len(name) <= 253 else f"{name[:242]}-{label_value(node)[-10:]}".replace(".-", "-"),
            "namespace": self.props["namespace"], "labels": labels, "annotations": meta.get("annotations") or {}}}
        try:
            self.api.create_namespaced_pod(self.props["namespace"], pod, _preload_content=False)
        except ApiException as error:
            if error.status != 409:   # a resumed rollback finds its pod there
                raise

    def revision_template(self, revision: str) -> dict:
        """The pod template the driver DaemonSet's `revision` runs (its ControllerRevision's)."""
        found = [r for r in self._revisions(self.daemonset()) if (r["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
        if not found:
            raise RuntimeError(f"the driver DaemonSet has no revision {revision}")
        return found[0]["data"]["spec"]["template"]

    def create_pod(self, pod: dict) -> None:
        """Create `pod`; one of that name already there (a resumed rollout's) is no error."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.create_namespaced_pod(pod["metadata"]["namespace"], pod, _preload_content=False)
        except ApiException as error:
            if error.status != 409:
                raise

    def prepull_pods(self, revision: Optional[str] = None) -> list[dict]:
        """The driver DaemonSet's pre-pull pods (of `revision`, when given), terminating ones included."""
        return self._data(self.api.list_namespaced_pod(
            self.props["namespace"], label_selector=prepull_selector(self.props["daemonSet"], revision),
            _preload_content=False))["items"]

    def nodes(self, names: list[str]) -> list[dict]:
        """The live nodes among `names`, in one list call."""
        wanted = set(names)
        return [n for n in self._data(self.api.list_node(_preload_content=False))["items"] if n["metadata"]["name"] in wanted]

    def delete_pod(self, pod: dict) -> None:
        """Delete `pod`; one already gone is no error."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"], _preload_content=False)
        except ApiException as error:
            if error.status != 404:
                raise

    def delete_rollback_pods(self, node: str) -> None:
        for pod in self.rollback_pods(node):
            self.delete_pod(pod)

    def facts(self, nodes: list[str], target_install: Optional[str] = None, keys: Optional[dict] = None) -> list[NodeFacts]:
        """Each node's facts; `target_install`: the install_key of the revision to roll out (None: unknown, so every
        change takes the full path); `keys`: install_keys(), when the caller has read them already."""
        drivers = self.driver_pods()
        keys = keys if keys is not None else (self.install_keys() if target_install else {})
        # Two lists, not two calls per node: on 100 nodes that took seconds at each end of a rollout.
        live_nodes = {n["metadata"]["name"]: n for n in self._data(self.api.list_node(_preload_content=False))["items"]}
        jobs: dict[str, list[str]] = {}
        for pod in self._data(self.api.list_pod_for_all_namespaces(_preload_content=False))["items"]:
            if self.gcu_job(pod):
                jobs.setdefault((pod.get("spec") or {}).get("nodeName"), []).append(
                    f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        pool = self.props.get("pool")
        found = []
        for name in sorted(set(nodes)):
            node = live_nodes.get(name)
            if node is None:
                continue
            in_now = (node["metadata"].get("labels") or {}).get(DRIVER_POOL_LABEL, "")
            gcu = jobs.get(name, [])
            driver = drivers.get(name)
            driver_revision = (driver["metadata"].get("labels") or {}).get(REVISION_LABEL) if driver else None
            found.append(
                NodeFacts(
                    name=name,
                    unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
                    labels=node["metadata"].get("labels") or {},
                    annotations=node["metadata"].get("annotations") or {},
                    driver_revision=driver_revision,
                    gcu_pods=gcu,
                    pending_taint=_has_pending_taint(node),
                    same_install=target_install is not None and keys.get(driver_revision) == target_install,
                    moving_from=in_now if pool and in_now != pool["name"] else None,
                )
            )
        return found


# ---------------------------------------------------------------------------- one node


class NodeUpgrade:
    """The steps of one node's upgrade, each recorded on the node."""

    def __init__(self, cluster: Cluster, node: str, revision: str, log: Callable[[str], None], previous: Optional[str] = None):
        self.cluster, self.node, self.revision, self.log = cluster, node, revision, log
        self.previous = previous  # the revision a rollback puts back
        self.props = cluster.props
        self.started = cluster.clock()
        # What an operator asks afterwards: when each state began, which pods were moved, how long it took.
        self.states: list[dict] = []
        self.evicted: list[str] = []
        # The agents that ran on the node when they were paused; None: not known (a resumed upgrade paused them).
        self.agents_ran: Optional[set] = None

    def state(self, state: str, reason: Optional[str] = None) -> None:
        self.cluster.patch_node(self.node, {"metadata": {"labels": {STATE_LABEL: state}, "annotations": {REASON_ANNOTATION: reason}}})
        self.states.append({"state": state, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "second": round(self.cluster.clock() - self.started, 1)})

    def report(self, result: str) -> dict:
        return {"result": result, "seconds": round(self.cluster.clock() - self.started, 1), "states": self.states,
                "evicted": self.evicted}

    def wait(self, step: str, timeout: float, done: Callable[[], bool], what: Callable[[], str]) -> None:
        deadline = self.cluster.clock() + timeout
        while True:
            seen = self.cluster.seen(self.node)
            if done():
                return
            if self.cluster.clock() > deadline:
                raise NodeFailed(self.node, step, f"{what()} after {timeout:.0f} s")
            # A node deleted meanwhile is reported at once, not after the step's whole timeout.
            if self.cluster.node(self.node) is None:
                raise NodeLeft(self.node, step)
            self.cluster.until_changed(self.node, seen, POLL)

    def ready_check(self) -> None:
        """Nothing is done on a node that is gone or NotReady: its pods could not move nor its driver restart."""
        node = self.cluster.node(self.node)
        if node is None:
            raise NodeLeft(self.node, "ready check")
        why = not_ready(node)
        if why is not None:
            raise NodeFailed(self.node, "ready check", f"the node is NotReady ({why}); nothing was done on it")

    def run(self) -> None:
        self.ready_check()
        self.state(UPGRADE_REQUIRED)
        self.cordon()
        self.wait_for_jobs()
        self.evict()
        self.pause_operands()
        self.restart_driver(move=True)
        self.restore_operands()
        self.validate()
        self.uncordon()
        self.state(DONE)

    def run_restart_only(self) -> None:
        """What the driver installs is unchanged: its pod is replaced in place (it finds its version loaded) while the
        node keeps serving; nothing is moved or paused."""
        self.ready_check()
        self.state(RESTART_REQUIRED)
        self.restart_driver()
        self.state(DONE)

    def cordon(self) -> None:
        node = self.cluster.node(self.node)
        if node is None:
            raise NodeLeft(self.node, "cordon")
        annotations = node["metadata"].get("annotations") or {}
        if not (node.get("spec") or {}).get("unschedulable"):
            self.cluster.patch_node(
                self.node, {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: "true"}}}
            )
        elif CORDONED_ANNOTATION not in annotations:
            self.log(f"{self.node}: already unschedulable; it stays so afterwards")
        self.state(CORDONED)

    def wait_for_jobs(self) -> None:
        wait = self.props.get("waitForCompletion") or {}
        selector = wait.get("selector") or ""
        if not selector:
            return
        self.state(WAITING)
        timeout = float(wait.get("timeoutSeconds") or 0)
        running = lambda: [p["metadata"]["name"] for p in self.cluster.pods_on(self.node, selector) if _live(p)]  # noqa: E731
        try:
            self.wait("wait for jobs", timeout, lambda: not running(), lambda: f"pods {', '.join(running())} still running")
        except NodeFailed as timed_out:
            self.log(f"{self.node}: {timed_out.message}; evicting them")

    def _gcu_pods(self) -> list[dict]:
        return self.cluster.gcu_pods(self.node)

    def evict(self) -> None:
        from kubernetes.client.exceptions import ApiException

        self.state(EVICTING)
        timeout = float(self.props["evictionTimeoutSeconds"])
        deadline = self.cluster.clock() + timeout
        blocked: dict[str, str] = {}
        while True:
            seen = self.cluster.seen(self.node)
            pods = self._gcu_pods()
            if not pods:
                return
            for pod in pods:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                key = f"{meta['namespace']}/{meta['name']}"
                body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
                try:
                    self.cluster.api.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body, _preload_content=False)
                    blocked.pop(key, None)  # evicted after all: what is left of it is terminating
                    self.evicted.append(key)
                except ApiException as error:
                    if error.status == 404:
                        continue
                    if error.status != 429:  # 429: a PodDisruptionBudget does not allow it yet
                        raise
                    blocked[key] = "a PodDisruptionBudget does not allow it yet"
            if self.cluster.clock() > deadline:
                break
            self.cluster.until_changed(self.node, seen, POLL)
        left = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self._gcu_pods()]
        drain = self.props.get("drain") or {}
        if not drain.get("enabled"):
            why = "; ".join(f"{p}: {blocked.get(p, 'still terminating')}" for p in left)
            raise NodeFailed(self.node, "evict", f"GCU pods still on the node after {timeout:.0f} s ({why}); "
                             "raise evictionTimeoutSeconds, relax the PodDisruptionBudget, or enable drain")
        self.log(f"{self.node}: eviction did not finish in {timeout:.0f} s; draining {', '.join(left)} (PodDisruptionBudgets overridden)")
        for pod in self._gcu_pods():
            self.evicted.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
            self.cluster.delete_pod(pod)
        self.wait("drain", float(drain.get("timeoutSeconds") or 300), lambda: not self._gcu_pods(),
                  lambda: f"pods {', '.join(p['metadata']['name'] for p in self._gcu_pods())} still on the node")

    def _operand_pods(self) -> list[dict]:
        operands = set(self.props["operands"])
        return [p for p in self.cluster.pods_on(self.node, f"{PART_OF_LABEL}={PART_OF}")
                if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") in operands and _live(p)]

    def pause_operands(self) -> None:
        if not self.props["operands"]:
            return
        node = self.cluster.node(self.node) or {"metadata": {}}
        labels = node["metadata"].get("labels") or {}
        annotations = node["metadata"].get("annotations") or {}
        if PAUSED_ANNOTATION not in annotations and self.agents_ran is None:   # the first pause (a rollback pauses again)
            self.agents_ran = {(p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") for p in self._operand_pods()}
        # Recorded once: a resumed upgrade must not mistake its own pause for the operator's value.
        previous = json.loads(annotations[PAUSED_ANNOTATION]) if PAUSED_ANNOTATION in annotations else {
            DEPLOY_LABEL_PREFIX + key: labels.get(DEPLOY_LABEL_PREFIX + key) for key in self.props["operands"]
        }
        self.cluster.patch_node(self.node, {"metadata": {
            "labels": {key: PAUSED for key in previous},
            "annotations": {PAUSED_ANNOTATION: json.dumps(previous, sort_keys=True)},
        }})
        self.wait("pause operands", float(self.props["operandReadyTimeoutSeconds"]), lambda: not self._operand_pods(),
                  lambda: f"operand pods {', '.join(p['metadata']['name'] for p in self._operand_pods())} still on the node")

    def restart_driver(self, move: bool = False) -> None:
        """The node's driver pod replaced by one of the current revision; `move` (the full path only: the node is
        drained): first into this rollout's pool, when it runs another pool's driver."""
        self.state(RESTARTING)
        self.release_rollback()
        if move:
            self.move_into_pool()
        pod = self.cluster.driver_pods(self.node).get(self.node)
        if pod is not None and (pod["metadata"].get("labels") or {}).get(REVISION_LABEL) != self.revision:
            self.cluster.delete_pod(pod)

        def ready() -> bool:
            new = self.cluster.driver_pods(self.node).get(self.node)
            return bool(new) and (new["metadata"].get("labels") or {}).get(REVISION_LABEL) == self.revision and _ready(new)

        def why() -> str:
            new = self.cluster.driver_pods(self.node).get(self.node)
            if new is None:
                return "no new driver pod was scheduled on the node"
            waiting = [c.get("state", {}).get("waiting", {}).get("reason") for c in (new.get("status") or {}).get("containerStatuses") or []]
            detail = ", ".join(w for w in waiting if w) or (new.get("status") or {}).get("phase", "not Ready")
            return f"the new driver pod {new['metadata']['name']} is not Ready ({detail}; `kubectl logs` it: the driver version check says why)"

        self.wait("restart driver", float(self.props["driverReadyTimeoutSeconds"]), ready, why)

    def move_into_pool(self) -> None:
        """A node whose driver runs in another pool's DaemonSet (or the component's own): every driver DaemonSet is held
        off it (its deploy label), and only once no driver pod is left there does it take this pool's label and the
        deploy label back, so this pool's DaemonSet starts its pod: never two drivers on the node at once."""
        pool = self.props.get("pool")
        node = self.cluster.node(self.node) or {"metadata": {}}
        labels, annotations = node["metadata"].get("labels") or {}, node["metadata"].get("annotations") or {}
        if not pool or labels.get(DRIVER_POOL_LABEL, "") == pool["name"]:
            return
        if MOVE_ANNOTATION in annotations:   # recorded once: a resumed move keeps the operator's value
            held = json.loads(annotations[MOVE_ANNOTATION])
        else:
            held = {"label": pool["holdLabel"], "value": labels.get(pool["holdLabel"])}
            self.cluster.patch_node(self.node, {"metadata": {"labels": {held["label"]: PAUSED},
                                                             "annotations": {MOVE_ANNOTATION: json.dumps(held, sort_keys=True)}}})
        old = lambda: self.cluster.pods_on(self.node, pool["driverPods"])  # noqa: E731 - terminating ones too
        self.wait("move driver", float(self.props["driverReadyTimeoutSeconds"]), lambda: not old(),
                  lambda: f"driver pods {', '.join(p['metadata']['name'] for p in old())} still on the node")
        self.cluster.patch_node(self.node, {"metadata": {"labels": {DRIVER_POOL_LABEL: pool["name"] or None, held["label"]: held["value"]},
                                                         "annotations": {MOVE_ANNOTATION: None}}})

    def release_rollback(self) -> None:
        """A node an earlier rollout rolled back: its pinned pod of the previous driver goes, and the DaemonSet may run
        there again (the driver deploy label as it was)."""
        node = self.cluster.node(self.node) or {"metadata": {}}
        held = rollback_hold(node["metadata"].get("annotations") or {})
        if held is None:
            return
        self.cluster.delete_rollback_pods(self.node)
        self.wait("restart driver", float(self.props["driverReadyTimeoutSeconds"]), lambda: not self.cluster.rollback_pods(self.node),
                  lambda: "the rolled-back driver pod is still on the node")
        self.cluster.patch_node(self.node, {"metadata": {"labels": {held["label"]: held["value"]}, "annotations": {ROLLBACK_ANNOTATION: None}}})

    def roll_back(self, failure: NodeFailed) -> None:
        """The new driver failed: the node gets the driver it had back (a pod of the previous revision pinned to it,
        the DaemonSet held off through its deploy label), then its agents, validation and uncordon, as after an upgrade."""
        reason = f"{failure.step}: {failure.message}"[:1000]
        self.state(ROLLING_BACK, reason)
        self.log(f"{self.node}: the new driver failed ({reason}); rolling back to revision {self.previous}")
        self.pause_operands()
        node = self.cluster.node(self.node) or {"metadata": {}}
        labels, annotations = node["metadata"].get("labels") or {}, node["metadata"].get("annotations") or {}
        if ROLLBACK_ANNOTATION not in annotations:   # recorded once: a resumed rollback keeps the operator's value
            label = self.props["rollback"]["holdLabel"]
            held = {"label": label, "value": labels.get(label), "revision": self.previous}
            self.cluster.patch_node(self.node, {"metadata": {"labels": {label: PAUSED},
                                                             "annotations": {ROLLBACK_ANNOTATION: json.dumps(held, sort_keys=True)}}})
        timeout = float(self.props["driverReadyTimeoutSeconds"])
        # Held off the node, the DaemonSet's controller deletes its new pod there (scheduled or still pending).
        self.wait("roll back", timeout, lambda: self.node not in self.cluster.driver_pods(self.node),
                  lambda: "the new driver pod is still on the node")
        self.cluster.create_rollback_pod(self.node, str(self.previous))

        def back() -> bool:
            return any(_ready(p) for p in self.cluster.rollback_pods(self.node))

        self.wait("roll back", timeout, back, lambda: f"the driver pod of revision {self.previous} is not Ready (`kubectl logs` it)")
        self.restore_operands()
        self.validate()
        self.uncordon()
        self.state(ROLLED_BACK, reason)

    def restore_operands(self) -> None:
        node = self.cluster.node(self.node) or {"metadata": {}}
        raw = (node["metadata"].get("annotations") or {}).get(PAUSED_ANNOTATION)
        if raw is None:
            return
        previous = json.loads(raw)
        self.cluster.patch_node(self.node, {"metadata": {"labels": previous, "annotations": {PAUSED_ANNOTATION: None}}})
        # Not those that did not run before (a first install moving nodes into their pools deploys the agents later).
        expected = [k[len(DEPLOY_LABEL_PREFIX):] for k, v in previous.items()
                    if v != "false" and (self.agents_ran is None or k[len(DEPLOY_LABEL_PREFIX):] in self.agents_ran)]

        def ready() -> bool:
            pods = self._operand_pods()
            present = {(p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") for p in pods if _ready(p)}
            return set(expected) <= present

        self.wait("restore operands", float(self.props["operandReadyTimeoutSeconds"]), ready,
                  lambda: f"operands {', '.join(sorted(expected))} not all Ready on the node")

    def validate(self) -> None:
        validation = self.props.get("validation")
        if not validation or not validation.get("enabled", True):
            return
        if self.agents_ran == set() and self.props["operands"]:
            # No agent to advertise the GCUs yet (a first install): the validation step checks the node once they run.
            self.log(f"{self.node}: no GCU agent ran here before the driver; validated by the validation step after they deploy")
            return
        from .node_validation import check_settings, validate_node

        self.state(VALIDATING)
        result = validate_node(self.cluster.api, self.node, check_settings(validation))
        if not result.passed:
            if validation.get("mode") == "warn":
                self.log(f"{self.node}: validation did not pass ({result.message}); mode warn: uncordoning anyway")
                return
            raise NodeFailed(self.node, "validate", result.message)

    def uncordon(self) -> None:
        self.cluster.set_pending_taint(self.node, False)
        node = self.cluster.node(self.node) or {"metadata": {}}
        if (node["metadata"].get("annotations") or {}).get(CORDONED_ANNOTATION) != "true":
            return
        self.cluster.patch_node(self.node, {"spec": {"unschedulable": None}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}})

        # The scheduler refuses the node until the node controller lifts the taint mirroring the cordon (seconds, on a
        # busy control plane): a job the next wave evicts would land on a node still to upgrade, and move twice.
        def lifted() -> bool:
            now = self.cluster.node(self.node)
            return now is None or not _has_taint(now, UNSCHEDULABLE_TAINT)

        try:
            self.wait("uncordon", UNCORDON_SETTLE_SECONDS, lifted, lambda: f"the node controller has not lifted {UNSCHEDULABLE_TAINT}")
        except NodeLeft:
            raise
        except NodeFailed as late:   # uncordoned all the same: the scheduler takes the node once the controller catches up
            self.log(f"{self.node}: uncordoned; {late.message}")


# ---------------------------------------------------------------------------- the rollout


def wait_driver_ready(cluster: Cluster, revision: str, nodes: list[str], timeout: float) -> None:
    """The gate for what follows the driver: on every GCU node it runs on, the current driver is Ready."""
    deadline = cluster.clock() + timeout
    while True:
        seen = cluster.seen(None)
        drivers = cluster.driver_pods()
        waiting = sorted(
            n for n in nodes
            if n in drivers and ((drivers[n]["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision or not _ready(drivers[n]))
        )
        if not waiting:
            return
        if cluster.clock() > deadline:
            raise RuntimeError(
                f"the driver is not Ready on {', '.join(waiting)} after {timeout:.0f} s: its pod's readiness check "
                "(gcu-driver-entrypoint --check) says the installed version is not loaded; see its log"
            )
        cluster.until_changed(None, seen, POLL)


def node_states(facts: list, revision: Optional[str]) -> dict[str, str]:
    """Each node's upgrade state: its state label while (or after) a rollout touched it, else whether its
    driver pod runs `revision`."""
    return {f.name: f.labels.get(STATE_LABEL) or ("current" if f.driver_revision == revision else "upgrade-required") for f in facts}


@dataclass
class Progress:
    """What waves did: nodes done, failed (with why), left (deleted meanwhile), each touched node's report, and why
    the waves after stopped without a failure (a closed window)."""

    done: list = field(default_factory=list)
    failed: dict = field(default_factory=dict)
    left: list = field(default_factory=list)
    reports: dict = field(default_factory=dict)
    paused: Optional[str] = None
    rolled_back: list = field(default_factory=list)


def _waves(cluster: Cluster, waves: list, revision: str, log: Callable[[str], None], restart_only: bool = False,
           gate: Callable[[], Optional[str]] = lambda: None, previous: Optional[dict] = None, parallel: int = 1,
           room: int = 1, free: frozenset = frozenset()) -> Progress:
    """Run the nodes of `waves` in their order, each on the full path (or `restart_only`): up to `parallel` at once,
    of which at most `room` are made unavailable by it (nodes in `free` were already). A
    node starts as soon as a running one finishes, not once its whole wave has: a slow node holds up one slot, not
    the nine beside it. A node starts only when `gate` lets it, and none once a node failed (those running finish).
    With the `rollback` input, a node whose new driver failed is rolled back to its `previous` revision."""
    progress = Progress()
    previous = previous or {}
    order = [n for wave in waves for n in wave]
    parallel, room = max(1, parallel), max(1, room)

    def can_roll_back(failure: NodeFailed) -> bool:
        back = previous.get(failure.node)
        return bool(cluster.props.get("rollback")) and failure.step in AFTER_THE_NEW_DRIVER and back not in (None, revision)

    upgraded, failed, left, reports = progress.done, progress.failed, progress.left, progress.reports
    done = "restarted" if restart_only else "upgraded"

    def one(node: str) -> Optional[NodeFailed]:
        upgrade = NodeUpgrade(cluster, node, revision, log, previous.get(node))
        try:
            upgrade.run_restart_only() if restart_only else upgrade.run()
            reports[node] = upgrade.report(done)
            return None
        except NodeFailed as error:
            failure = error
        except Exception as error:  # noqa: BLE001 - recorded on the node like any other failure
            failure = NodeFailed(node, "upgrade", str(error))
        # Whatever failed (a 404, a wait), a node that is gone has nothing left to upgrade.
        failure = failure if isinstance(failure, NodeLeft) or cluster.node(node) is not None else NodeLeft(node, failure.step)
        if not isinstance(failure, NodeLeft) and can_roll_back(failure):
            try:
                upgrade.roll_back(failure)
                reports[node] = {**upgrade.report(ROLLED_BACK), "reason": f"{failure.step}: {failure.message}"}
                return RolledBack(failure, previous[node])
            except Exception as error:  # noqa: BLE001 - the node stays cordoned and failed, saying both
                failure = NodeFailed(node, failure.step, f"{failure.message}; rolling back failed too: {error}")
        reports[node] = {**upgrade.report("left" if isinstance(failure, NodeLeft) else "failed"),
                         "reason": f"{failure.step}: {failure.message}"}
        return failure

    def record(node: str, failure: Optional[NodeFailed]) -> None:
        if failure is None:
            upgraded.append(node)
            log(f"{node}: driver {done}")
        elif isinstance(failure, NodeLeft):
            left.append(node)
            log(f"{node}: {LEFT} (at {failure.step}); going on with the other nodes")
        elif isinstance(failure, RolledBack):
            failed[node] = f"{failure.step}: {failure.message} (rolled back to revision {failure.revision})"
            progress.rolled_back.append(node)
            log(f"{node}: rolled back to revision {failure.revision}, validated and uncordoned")
        else:
            failed[node] = f"{failure.step}: {failure.message}"
            try:
                NodeUpgrade(cluster, node, revision, log).state(FAILED, failed[node][:1000])
            except Exception:  # noqa: BLE001 - the node may be gone; the error says so
                pass

    def may_start(node: str, running: dict) -> bool:
        unavailable = sum(1 for n in running.values() if n not in free)
        return len(running) < parallel and (node in free or unavailable < room)

    pending, running = list(order), {}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        while True:
            while pending and not failed and not progress.paused and may_start(pending[0], running):
                progress.paused = gate()
                if progress.paused:
                    log(f"driver rollout paused before {', '.join(pending)}: {progress.paused}")
                    break
                node = pending.pop(0)
                running[pool.submit(one, node)] = node
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                record(running.pop(future), future.result())
    upgraded.sort(key=order.index)   # reported in the plan's order, whichever finished first
    return progress


def rollout(props: dict, log: Callable[[str], None] = lambda _: None, cluster: Optional[Cluster] = None) -> dict:
    """Upgrade every node not at the driver's current revision, in the plan's order; the outputs to record."""
    cluster = cluster or Cluster(props)
    with NodeChanges(cluster.api) as cluster.changes:
        try:
            return _roll(props, log, cluster)
        finally:
            cluster.changes = None


def _roll(props: dict, log: Callable[[str], None], cluster: Cluster) -> dict:
    revision = cluster.current_revision()
    nodes = cluster.pool_nodes(list(props.get("nodes") or []))
    keys = cluster.install_keys()
    facts = cluster.facts(nodes, keys.get(revision), keys)
    the_plan = plan(facts, revision, int(props["maxParallel"]), props["maxUnavailable"])
    previous = {f.name: previous_revision(f) for f in facts}
    started = time.time()
    gate = lambda: wave_gate(props, started)  # noqa: E731
    # Outside a window nothing starts: no node repels jobs for a rollout that is not running.
    repelling = set(the_plan.nodes) if gate() is None else set()
    with ThreadPoolExecutor(max_workers=TAINT_WORKERS) as pool:   # an interrupted rollout's taints go from nodes with nothing left
        list(pool.map(lambda name: cluster.set_pending_taint(name, name in repelling), sorted(set(nodes))))
    try:
        if repelling and the_plan.waves:   # the full path's images on its nodes while they still serve jobs
            pull_first(cluster, [n for n in the_plan.nodes if n in repelling], revision,
                       float(props["driverReadyTimeoutSeconds"]), log, not_ready)
        # The restart-only nodes first: quick, and nothing is cordoned if one of them fails.
        restarts = _waves(cluster, the_plan.restarts, revision, log, restart_only=True, gate=gate, previous=previous,
                          parallel=the_plan.batch, room=the_plan.batch)
        upgrades = _waves(cluster, the_plan.waves, revision, log, gate=gate, previous=previous, parallel=the_plan.parallel,
                          room=the_plan.room, free=the_plan.free) \
            if not (restarts.failed or restarts.paused) else Progress(paused=restarts.paused)
    finally:   # stopped or done: no node keeps repelling jobs
        def untaint(name: str) -> None:
            try:
                cluster.set_pending_taint(name, False)
            except Exception as error:  # noqa: BLE001 - the rollout's own error (if any) is the one to report
                log(f"{name}: could not remove the taint {PENDING_TAINT['key']} ({error}); the next `pulumi up` or "
                    "destroy removes it")

        with ThreadPoolExecutor(max_workers=TAINT_WORKERS) as pool:
            list(pool.map(untaint, sorted(repelling)))
    upgraded, restarted, paused = upgrades.done, restarts.done, upgrades.paused
    failed, left = {**restarts.failed, **upgrades.failed}, restarts.left + upgrades.left
    rolled = restarts.rolled_back + upgrades.rolled_back
    planned = [n for batch in the_plan.restarts for n in batch] + the_plan.nodes
    untouched = [n for n in planned if n not in upgraded and n not in restarted and n not in failed and n not in left]
    if not failed:
        waiting = set(untouched) if paused else set()
        wait_driver_ready(cluster, revision, [n for n in nodes if n not in the_plan.skipped and n not in left and n not in waiting],
                          float(props["driverReadyTimeoutSeconds"]))
    skipped = {**the_plan.skipped, **{n: LEFT for n in left}}
    states = node_states(cluster.facts(nodes), revision)
    outputs = {
        "revision": revision,
        "states": states,
        "skipped": skipped,
        "upgraded": upgraded,
        "restarted": restarted,
        "failed": failed,
        "rolledBack": rolled,
        "paused": f"{paused}; waiting: {', '.join(untouched)}" if paused and untouched else "",
        "mostUnavailable": the_plan.most_unavailable,
        "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reports": {**restarts.reports, **upgrades.reports},
        "message": ("; ".join(
            ([f"driver upgraded on {len(upgraded)} node(s)"] if the_plan.waves else [])
            + ([f"driver pod restarted only (nothing installed changed) on {len(restarted)} node(s)"] if the_plan.restarts else [])
            + ([f"paused ({paused}): {len(untouched)} node(s) wait for the next `pulumi up`"] if paused and untouched else [])
        ) or "every GCU node runs the current driver") + (f"; skipped: {', '.join(sorted(skipped))}" if skipped else ""),
    }
    if paused and untouched:
        log(f"driver rollout paused: {paused}; {len(untouched)} node(s) wait ({', '.join(untouched)}); "
            "the next `pulumi up` (inside a window, with windows) continues")
    if failed:
        halted = [n for n in failed if n not in rolled]
        raise RuntimeError(
            "driver upgrade stopped: " + "; ".join(f"{n} failed at {why}" for n, why in sorted(failed.items()))
            + (f". Rolled back: {', '.join(rolled)}: the driver it had runs again, its agents are back, it is validated "
               f"and uncordoned (state {ROLLED_BACK}); the next `pulumi up` retries it first" if rolled else "")
            + (f". The node stays in state {FAILED} ({REASON_ANNOTATION} says why), cordoned if its upgrade had begun" if halted else "")
            + "; "
            + (f"{LEFT}: {', '.join(left)}; " if left else "")
            + (f"not started: {', '.join(untouched)}. " if untouched else "")
            + "Fix it and run `pulumi up` again: finished nodes are not repeated."
        )
    return outputs


def clean_up(props: dict) -> None:
    """Leave no cordon, label, annotation or taint of ours behind (delete, during or after an upgrade)."""
    cluster = Cluster(props)
    delete_prepull_pods(cluster)
    pool = props.get("pool") or {}
    for name in cluster.pool_nodes(list(props.get("nodes") or []), taken=True):
        node = cluster.node(name)
        if node is None:
            continue
        meta = node["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        patch: dict = {"metadata": {"labels": {}, "annotations": {}}}
        if pool.get("name") and labels.get(DRIVER_POOL_LABEL) == pool["name"]:   # the node as it was before the pool
            patch["metadata"]["labels"][DRIVER_POOL_LABEL] = None
        moving = annotations.get(MOVE_ANNOTATION)
        if moving is not None:
            held = json.loads(moving)
            patch["metadata"]["labels"][held["label"]] = held["value"]
            patch["metadata"]["annotations"][MOVE_ANNOTATION] = None
        if STATE_LABEL in labels:
            patch["metadata"]["labels"][STATE_LABEL] = None
        if REASON_ANNOTATION in annotations:
            patch["metadata"]["annotations"][REASON_ANNOTATION] = None
        if PAUSED_ANNOTATION in annotations:
            patch["metadata"]["labels"].update(json.loads(annotations[PAUSED_ANNOTATION]))
            patch["metadata"]["annotations"][PAUSED_ANNOTATION] = None
        if annotations.get(CORDONED_ANNOTATION) == "true":
            patch["spec"] = {"unschedulable": None}
            patch["metadata"]["annotations"][CORDONED_ANNOTATION] = None
        held = rollback_hold(annotations)
        if held:   # the pinned previous driver goes with the rest
            cluster.delete_rollback_pods(name)
            patch["metadata"]["labels"][held["label"]] = held["value"]
            patch["metadata"]["annotations"][ROLLBACK_ANNOTATION] = None
        if patch["metadata"]["labels"] or patch["metadata"]["annotations"] or "spec" in patch:
            cluster.patch_node(name, patch)
        cluster.set_pending_taint(name, False)


# ---------------------------------------------------------------------------- the provider


_log = engine_log  # progress in `pulumi up`'s output


def _outputs(props: dict, result: dict) -> dict:
    return {**inputs_of(props, INPUTS), **result}


def _pending(props: dict, olds: Optional[dict] = None) -> bool:
    """Nodes not at the driver's current revision (a skip label removed, a failed node, a new node), or nodes that
    left or joined this rollout's pool since `olds` reported (so its outputs stay true), for the diff."""
    try:
        cluster = Cluster(props)
        revision = cluster.current_revision(timeout=5)
        keys = cluster.install_keys()
        facts = cluster.facts(cluster.pool_nodes(list(props.get("nodes") or [])), keys.get(revision), keys)
        # A taint left by an interrupted rollout is work too: the update removes it.
        planned = plan(facts, revision, 1, "100%")
        moved = olds is not None and props.get("pool") is not None and {f.name for f in facts} != set(olds.get("states") or {})
        return bool(planned.waves or planned.restarts) or any(f.pending_taint for f in facts) or moved
    except ClusterMismatch:
        raise
    except Exception:  # noqa: BLE001 - the live cluster unreadable means "unknown", not "changed"
        return False


class DriverUpgradeProvider(ResourceProvider):
    serialize_as_secret_always = False

    @engine_watched
    def create(self, props: dict) -> CreateResult:
        return CreateResult("driver-upgrade", _outputs(props, rollout(props, _log)))

    def read(self, id_: str, props: dict) -> ReadResult:
        cluster = Cluster(props)
        facts = cluster.facts(cluster.pool_nodes(list(props.get("nodes") or [])))
        revision = cluster.current_revision(timeout=5)
        states = node_states(facts, revision)
        return ReadResult(id_, {**props, "revision": revision, "states": states})

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        changed = changed_inputs(olds, news, INPUTS)
        if not changed and (olds.get("failed") or _pending(news, olds)):
            changed = ["nodes"]
        return bundled_diff(olds, news, changed)

    @engine_watched
    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(_outputs(news, rollout(news, _log)))

    @engine_watched
    def delete(self, _id: str, props: dict) -> None:
        clean_up(props)


class DriverUpgrade(Bundled, module="gcu", name="DriverUpgrade"):
    """Outputs (attributes): revision, states (per node), skipped, upgraded, restarted (restart-only path), failed, rolledBack
    (failed nodes put back on the driver they had), mostUnavailable, message,
    finishedAt (when the last rollout ended, UTC), reports (per node the last rollout touched: result, seconds, each
    state and when it began, the pods evicted)."""

    PROVIDER = DriverUpgradeProvider
    OUTPUTS = OUTPUTS
