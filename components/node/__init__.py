"""Node code: what runs on a GCU node itself (the container runtime's configuration, which runtime a node uses).

`NODE_FILES` is Python (the standard library, and tomlkit for containerd's config) that runs
unchanged in the bundled dynamic providers (local transport, the engine's requirements.txt), in
the short-lived activation pods and in the toolkit image, which carries exactly these files under
/opt/gcu-stack/ and installs its base's tomlkit package. Engine code (providers, orchestration) is in
`components/providers/`.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE_FILES = ("hostfiles.py", "runtime_host.py", "cri_client.py", "containerd_host.py", "node_runtime.py")
NODE_CODE_DIR = "/opt/gcu-stack"
