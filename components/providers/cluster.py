"""A Kubernetes API client built from resource inputs, never cached between calls."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import yaml


def _looks_like_content(kubeconfig: str) -> bool:
    return "\n" in kubeconfig or kubeconfig.lstrip().startswith(("apiVersion", "{"))


def core_api(kubeconfig: Optional[str], context: Optional[str], pool_size: int = 32):
    """CoreV1Api for a kubeconfig path or content, the ambient kube context, or in-cluster credentials."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig and _looks_like_content(kubeconfig):
        config.load_kube_config_from_dict(yaml.safe_load(kubeconfig), context=context, client_configuration=configuration)
    elif kubeconfig or os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config")):
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return client.CoreV1Api(client.ApiClient(configuration))


def list_nodes(api: Any, page_size: int = 500) -> list[dict]:
    """Every node, as plain dicts, read in pages of `page_size` (a large cluster's list is not one response)."""
    nodes, token = [], None
    while True:
        page = json.loads(api.list_node(limit=page_size, _continue=token, _preload_content=False).data)
        nodes.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return nodes
