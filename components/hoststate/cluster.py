"""A Kubernetes API client built from resource inputs, never cached between calls."""

from __future__ import annotations

import os
from typing import Optional

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
