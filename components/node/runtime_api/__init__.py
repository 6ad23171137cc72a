"""Generated protobuf messages of the container runtime's APIs: do not edit, run `regenerate.py` instead.

Only the messages: cri_client.py calls the few methods it needs through grpcio's generic client
(`channel.unary_unary`), so no generated stub or servicer code is kept.

* `api_pb2`: the Kubernetes CRI, runtime.v1 (k8s.io/cri-api v0.33.4
  pkg/apis/runtime/v1/api.proto; no maintained PyPI package ships it);
* `version_pb2`, `introspection_pb2` (+ `types_introspection_pb2`, `platform_pb2`): containerd's
  version and introspection services (github.com/containerd/containerd/api v1.8.0);
* `status_pb2`: google.rpc.Status, used only where googleapis-common-protos is not installed.

Generated with grpcio-tools 1.51.1 (protoc 3.21), so the code runs on the protobuf 3.21 runtime
that Debian bookworm and Ubuntu 24.04 ship (the toolkit image) as well as on the newer one
the engine's environment pins (requirements.txt). The modules import each other relatively: this
folder is `components.node.runtime_api` in the repo and `runtime_api` under /opt/gcu-stack/.
"""
