//go:build tools

// The Node Feature Discovery commands kube.sh builds; imported so `go mod tidy` keeps their dependencies.
package tools

import (
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-worker"
)
