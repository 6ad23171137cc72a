// The gcu-stack stand-in for Enflame's gcu-k8s-plugin: a device plugin advertising
// fake GCUs (see main.go). Built by devtools/fakegcu/__init__.py; go.sum is committed
// (GONOSUMDB=k8s.io,sigs.k8s.io: the checksum database here lacks some k8s.io entries).
module gcu-stack/devtools/fakegcu

go 1.24.0

require (
	golang.org/x/sys v0.31.0
	google.golang.org/grpc v1.68.1
	k8s.io/kubelet v0.33.4
)

require (
	github.com/gogo/protobuf v1.3.2 // indirect
	golang.org/x/net v0.38.0 // indirect
	golang.org/x/text v0.23.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20241209162323-e6fa225c2576 // indirect
	google.golang.org/protobuf v1.36.5 // indirect
)
