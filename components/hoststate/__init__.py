"""What gcu-stack manages on the nodes themselves (labels, the container runtime's configuration).

`NODE_FILES` is the node code: standard-library Python that runs unchanged in the bundled
dynamic providers, in the short-lived activation pods and in the toolkit image, which
carries exactly these files under /opt/gcu-stack/.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE_FILES = ("hostfiles.py", "runtime_host.py", "cri_client.py", "containerd_host.py", "node_runtime.py")
NODE_CODE_DIR = "/opt/gcu-stack"
