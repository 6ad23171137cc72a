"""Which container runtime a node uses, and the enflame runtime activated on it: the toolkit's entrypoint.

Standard library only (the modules it runs use tomlkit and grpcio), shipped with the other node code
(components/node/__init__.py NODE_FILES) under /opt/gcu-stack/ in the toolkit image.

    python3 node_runtime.py activate [--runtime auto|docker|containerd] [--node NAME]

`auto` (the default, CONTAINER_RUNTIME) reads the node's `status.nodeInfo.containerRuntimeVersion`
from the API server with the pod's service account, the way the provider chooses per node,
then runs `runtime_host.py activate` (docker://) or `containerd_host.py activate`
(containerd://) with their own settings from the environment. A node with another runtime is
reported and left alone (exit 0: nothing gcu-stack can do there).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import sys
import urllib.parse
from typing import Optional

try:
    from . import containerd_host, runtime_host
except ImportError:  # run as a script: the modules sit next to this file
    import containerd_host  # type: ignore[no-redef]
    import runtime_host  # type: ignore[no-redef]

SUPPORTED = ("docker", "containerd")
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def runtime_of(version: Optional[str]) -> Optional[str]:
    """`docker://20.10.24` -> "docker"; `containerd://1.6.20` -> "containerd"; anything else -> its scheme, or None."""
    if not version or "://" not in version:
        return None
    return version.split("://", 1)[0]


def node_runtime_version(node: str, account: str = SERVICE_ACCOUNT) -> str:
    """The node's containerRuntimeVersion, asked of the API server as this pod's service account."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = int(os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
    if not host:
        raise RuntimeError("not in a pod (no KUBERNETES_SERVICE_HOST): give the runtime with --runtime")
    with open(os.path.join(account, "token")) as handle:
        token = handle.read().strip()
    context = ssl.create_default_context(cafile=os.path.join(account, "ca.crt"))
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=10)
    try:
        connection.request("GET", f"/api/v1/nodes/{urllib.parse.quote(node)}", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"reading node {node} from the API server: HTTP {response.status} {body[:200]!r}")
    finally:
        connection.close()
    return ((json.loads(body).get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion") or ""


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
