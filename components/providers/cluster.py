"""A Kubernetes API client built from resource inputs, never cached between calls, and the cluster's identity."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import yaml
from pulumi.runtime.rpc import UNKNOWN

from ..kube_target import looks_like_content

# Where a cluster's identity is read: the kube-system namespace exists from a cluster's first moments to its last,
# and its UID changes only when the cluster is rebuilt (a new etcd), whatever its API server's address.
IDENTITY_NAMESPACE = "kube-system"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class ClusterMismatch(RuntimeError):
    """The cluster reached is not the one the stack's resources live on: nothing was done."""


def core_api(kubeconfig: Optional[str], context: Optional[str], pool_size: int = 32):
    """CoreV1Api for a kubeconfig path or content, the ambient kube context, or in-cluster credentials."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig and looks_like_content(kubeconfig):
        config.load_kube_config_from_dict(yaml.safe_load(kubeconfig), context=context, client_configuration=configuration)
    elif kubeconfig and not os.path.exists(kubeconfig) and in_a_pod():
        # A path recorded by the CLI on a node, read by the upgrade service in its pod (a delete acts on the recorded
        # inputs): the pod's own credentials; a recorded kube-system UID still refuses any other cluster.
        config.load_incluster_config(client_configuration=configuration)
    elif kubeconfig or os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config")):
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return client.CoreV1Api(client.ApiClient(configuration))


def in_a_pod() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(SERVICE_ACCOUNT_TOKEN)


def identify(api: Any, timeout: Optional[float] = None) -> dict[str, str]:
    """{"uid": kube-system's UID, "server": the API server's URL} of the cluster `api` reaches."""
    namespace = json.loads(api.read_namespace(IDENTITY_NAMESPACE, _preload_content=False, _request_timeout=timeout).data)
    return {"uid": namespace["metadata"]["uid"], "server": api.api_client.configuration.host}


def server_version(api: Any) -> dict:
    """The API server's /version as it answers it (the client's VersionInfo model drops the emulation fields)."""
    from kubernetes import client

    return json.loads(client.VersionApi(api.api_client).get_code(_preload_content=False).data)


def describe(identity: dict) -> str:
    server = identity.get("server")
    return f"{server} (kube-system UID {identity.get('uid')})" if server else f"with kube-system UID {identity.get('uid')}"


def mismatch(recorded: dict, found: dict, context: Optional[str]) -> ClusterMismatch:
    via = f"kube context {context!r}" if context else "the kube config"
    return ClusterMismatch(
        f"refused: this stack's resources live on the cluster {describe(recorded)}, but {via} now reaches "
        f"another cluster, {describe(found)}. Nothing was done. Point the context back at the stack's cluster "
        "(gcu-stack:kubeconfig / gcu-stack:kubeContext, KUBECONFIG or the current context), or, to move this stack "
        f"to the new cluster deliberately, `pulumi config set gcu-stack:adoptCluster {found.get('uid')}` and run `up`."
    )


def verify(found: dict, want: Optional[dict], context: Optional[str], adopt: Optional[str] = None) -> dict:
    """`found` when it is the cluster `want` names (or none is named, or `adopt` names `found`); else the refusal."""
    if want and want.get("uid") and found["uid"] != want["uid"] and adopt != found["uid"]:
        raise mismatch(want, found, context)
    return found


def checked_api(props: dict, pool_size: int = 32):
    """core_api for a bundled resource's properties, refusing any cluster but the one it recorded (`clusterUid`).

    A resource created before clusters were recorded has no clusterUid: it is reached unchecked until
    its next update records one.
    """
    api = core_api(props.get("kubeconfig"), props.get("context"), pool_size)
    expected = props.get("clusterUid")
    if expected and expected != UNKNOWN:  # unknown: a preview while the guard itself changes
        verify(identify(api), {"uid": expected}, props.get("context"))
    return api


def ensure_cluster(props: dict) -> None:
    """Refuse any cluster but the one the resource recorded, before a provider acts without the API (e.g. on a local runtime)."""
    if props.get("clusterUid"):
        checked_api(props, pool_size=1)


def list_nodes(api: Any, page_size: int = 500) -> list[dict]:
    """Every node, as plain dicts, read in pages of `page_size` (a large cluster's list is not one response)."""
    nodes, token = [], None
    while True:
        page = json.loads(api.list_node(limit=page_size, _continue=token, _preload_content=False).data)
        nodes.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return nodes
