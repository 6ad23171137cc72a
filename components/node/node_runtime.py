"""Which container runtime a node uses, and the enflame runtime activated on it: the toolkit's entrypoint.

Shipped with the other node code (components/node/__init__.py NODE_FILES) under /opt/gcu-stack/ in
the toolkit image.

    python3 node_runtime.py activate [--runtime auto|docker|containerd] [--node NAME]

`auto` (the default, CONTAINER_RUNTIME) reads the node's `status.nodeInfo.containerRuntimeVersion`
from the API server as the pod's service account (the kubernetes client, in-cluster configuration),
the way the provider chooses per node,
then runs `runtime_host.py activate` (docker://) or `containerd_host.py activate`
(containerd://) with their own settings from the environment. A node with another runtime is
reported and left alone (exit 0: nothing gcu-stack can do there).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Optional

try:
    from . import containerd_host, runtime_host
except ImportError:  # run as a script: the modules sit next to this file
    import containerd_host  # type: ignore[no-redef]
    import runtime_host  # type: ignore[no-redef]

SUPPORTED = ("docker", "containerd")


def runtime_of(version: Optional[str]) -> Optional[str]:
    """`docker://20.10.24` -> "docker"; `containerd://1.6.20` -> "containerd"; anything else -> its scheme, or None."""
    if not version or "://" not in version:
        return None
    return version.split("://", 1)[0]


def node_runtime_version(node: str) -> str:
    """The node's containerRuntimeVersion, asked of the API server as this pod's service account (kubernetes client)."""
    from kubernetes import client, config  # here, not at the top: the engine imports this module to parse settings
    from urllib3.exceptions import HTTPError

    try:
        config.load_incluster_config()
    except config.ConfigException as error:
        raise RuntimeError(f"not in a pod ({error}): give the runtime with --runtime") from None
    try:
        found = client.CoreV1Api().read_node(node, _request_timeout=10)
    except client.exceptions.ApiException as error:
        raise RuntimeError(f"reading node {node} from the API server: HTTP {error.status} {error.reason}: {str(error.body or '')[:200]}") from None
    except HTTPError as error:
        raise RuntimeError(f"reading node {node} from the API server: {error}") from None
    info = found.status.node_info if found.status else None
    return (info.container_runtime_version if info else None) or ""


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("activate",))
    parser.add_argument("--runtime", choices=("auto", *SUPPORTED), default=os.environ.get("CONTAINER_RUNTIME", "auto"))
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", socket.gethostname()))
    args, rest = parser.parse_known_args(argv)
    runtime = args.runtime
    if runtime == "auto":
        try:
            version = node_runtime_version(args.node)
        except (OSError, RuntimeError) as error:
            print(json.dumps({"error": f"node {args.node}: cannot tell its container runtime ({error}); "
                                       "set gcu-stack:containerRuntime to docker or containerd"}))
            return 1
        runtime = runtime_of(version)
        if runtime not in SUPPORTED:
            print(f"node {args.node}: container runtime {version!r} is not supported (docker, containerd): left alone",
                  file=sys.stderr)
            print(json.dumps({"runtime": runtime, "unsupported": version, "changed": False}))
            return 0
    module = runtime_host if runtime == "docker" else containerd_host
    return module.main([args.action, "--node", args.node, *rest])


if __name__ == "__main__":
    sys.exit(main())
