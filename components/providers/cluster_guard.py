"""ClusterGuard (pulumi-python:dynamic/gcu:ClusterGuard): the cluster a stack lives on, recorded and checked.

The stack declares two. `cluster` records the cluster the stack first deployed to (its
kube-system UID and API server URL) and refuses, in every preview and up, a kube context
that now reaches another one; the Kubernetes provider and every bundled resource wait for
it and carry its UID. `cluster-check` depends on every other resource, so `pulumi destroy`
deletes it first: it refuses there, before anything is deleted, when the pinned context
reaches another cluster (a plain destroy never runs the program). `cluster` also holds the cluster to the Kubernetes
versions gcu-stack supports (components/kube_support.py), in its check: the one call a preview makes for a new stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pulumi.dynamic import CheckFailure, CheckResult, CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult
from pulumi.runtime.rpc import UNKNOWN

from .. import kube_support
from .bundled import Bundled, engine_log, inputs_of
from .cluster import ClusterMismatch, core_api, describe, identify, server_version, verify


@dataclass
class ClusterGuardInputs:
    kubeconfig: Any = None  # the pinned kubeconfig (components/kube_target.py): a path, or content as a secret
    context: Optional[str] = None
    # gcu-stack:adoptCluster: the kube-system UID of a cluster this stack may move to (it records that one instead).
    adopt: Optional[str] = None
    # cluster-check's: the UID `cluster` recorded; None for `cluster` itself, which records its own.
    clusterUid: Any = None


INPUTS = tuple(ClusterGuardInputs.__dataclass_fields__)
OUTPUTS = ("uid", "server")


def live_identity(props: dict) -> dict:
    """The identity of the cluster the props' kubeconfig and context reach now; a clear error when none answers."""
    try:
        return identify(core_api(props.get("kubeconfig"), props.get("context"), pool_size=1))
    except ClusterMismatch:
        raise
    except Exception as error:  # noqa: BLE001 - any failure to reach it means nothing may be done
        where = f"kube context {props.get('context')!r}" if props.get("context") else "the kube config"
        raise ClusterMismatch(
            f"cannot confirm which cluster {where} reaches ({type(error).__name__}: {str(error).splitlines()[0][:300]}); "
            "nothing was done. Start the cluster or fix its kubeconfig; a stack whose cluster is gone for good is "
            "forgotten with `pulumi stack rm --force` (its objects are not deleted anywhere)."
        ) from None


def expected(props: dict) -> Optional[dict]:
    """The identity the resource holds the cluster to: cluster-check's given UID, or what `cluster` recorded."""
    if props.get("clusterUid"):
        return {"uid": props["clusterUid"], "server": props.get("server")}  # its server: what its create recorded
    if props.get("uid"):
        return {"uid": props["uid"], "server": props.get("server")}
    return None


def checked(props: dict) -> dict:
    """The live identity, when it is the expected one (or nothing is expected yet)."""
    return verify(live_identity(props), expected(props), props.get("context"))


def version_check(props: dict) -> Optional[str]:
    """Why the cluster the props reach runs a Kubernetes gcu-stack does not support, or None (a warning when it is
    newer than any proven). An unreachable cluster is not refused here: creating, diffing or deleting says so."""
    try:
        api = core_api(props.get("kubeconfig"), props.get("context"), pool_size=1)
        info = server_version(api)
    except Exception:  # noqa: BLE001 - reachability is reported, with what to do, where the identity is read
        return None
    via = f", reached through kube context {props['context']!r}" if props.get("context") else ""
    where = f"the cluster {api.api_client.configuration.host}{via},"
    caution = kube_support.caution(info, where)
    if caution:
        engine_log(caution, warning=True)
    return kube_support.refusal(info, where)


class ClusterGuardProvider(ResourceProvider):
    serialize_as_secret_always = False

    def check(self, _olds: dict, news: dict) -> CheckResult:
        # `cluster` itself (cluster-check is given its UID and reaches the same cluster): checked in every preview and
        # up, before anything of the stack is created or changed.
        if not news.get("clusterUid"):
            refused = version_check(news)
            if refused:
                return CheckResult(news, [CheckFailure("context", refused)])
        return CheckResult(news, [])

    def create(self, props: dict) -> CreateResult:
        found = checked(props)
        if not props.get("clusterUid"):  # `cluster` itself: say which cluster the stack is now bound to
            engine_log(f"this stack's cluster is recorded: {describe(found)}, reached through "
                 f"{'kube context ' + repr(props['context']) if props.get('context') else 'in-cluster credentials'}; "
                 "from now on a command that reaches another cluster is refused")
        return CreateResult(f"cluster-{found['uid']}", {**inputs_of(props, INPUTS), **found})

    def read(self, id_: str, props: dict) -> ReadResult:
        # `pulumi refresh`: the recorded cluster must still be the one reached.
        return ReadResult(id_, {**props, **checked(props)})

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        if news.get("clusterUid") == UNKNOWN:  # a preview while `cluster` changes: checked when it is known
            return DiffResult(changes=True, replaces=[], stables=[], delete_before_replace=False)
        found = live_identity(news)
        verify(found, expected({**news, "uid": olds.get("uid"), "server": olds.get("server")}), news.get("context"),
               news.get("adopt"))
        changed = [k for k in INPUTS if k != "adopt" and olds.get(k) != news.get(k)]
        if found["uid"] != olds.get("uid") or found["server"] != olds.get("server"):
            changed.append("uid")
        # The same cluster: uid is stable. (A dynamic resource's outputs are unknown in a preview that updates it all
        # the same, so the program gives what carries the UID a value it read itself: program.cluster_uid.)
        stables = ["uid"] if found["uid"] == olds.get("uid") else []
        return DiffResult(changes=bool(changed), replaces=[], stables=stables, delete_before_replace=False)

    def update(self, _id: str, olds: dict, news: dict) -> UpdateResult:
        found = live_identity(news)
        if news.get("clusterUid"):  # cluster-check: held to the UID it is given, never adopting
            verify(found, {"uid": news["clusterUid"]}, news.get("context"))
        else:
            verify(found, {"uid": olds.get("uid"), "server": olds.get("server")}, news.get("context"), news.get("adopt"))
        return UpdateResult({**inputs_of(news, INPUTS), **found})

    def delete(self, _id: str, props: dict) -> None:
        checked(props)


class ClusterGuard(Bundled, module="gcu", name="ClusterGuard"):
    """Outputs (attributes): uid (kube-system's UID), server (the API server's URL)."""

    PROVIDER = ClusterGuardProvider
    OUTPUTS = OUTPUTS
