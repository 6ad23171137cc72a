"""Node code: what runs on a GCU node itself (the container runtime's configuration, which runtime a node uses).

`NODE_FILES` is Python that runs unchanged in the bundled dynamic providers (local transport), in
the short-lived activation pods and in the toolkit image, which carries exactly these files under
/opt/gcu-stack/ (each module imports its siblings as a package here and as plain modules there;
`runtime_api/`, generated protobuf code, is a package in both). Besides the standard library it
uses pinned libraries: tomlkit (containerd's config), grpcio and protobuf (containerd's CRI), the
kubernetes client (the node's runtime, read by the toolkit's entrypoint),
which requirements.txt installs here and the toolkit image from its base's packages. Engine code (providers, orchestration) is in
`components/providers/`.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME_API = tuple(f"runtime_api/{name}" for name in (
    "__init__.py", "api_pb2.py", "version_pb2.py", "introspection_pb2.py", "types_introspection_pb2.py", "platform_pb2.py",
    "status_pb2.py"))
NODE_FILES = ("hostfiles.py", "runtime_host.py", "cri_client.py", "containerd_host.py", "node_runtime.py", *RUNTIME_API)
NODE_CODE_DIR = "/opt/gcu-stack"
