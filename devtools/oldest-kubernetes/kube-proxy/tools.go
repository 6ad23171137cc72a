//go:build tools

// The command kube.sh builds from this module; imported so `go mod tidy` keeps its dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
