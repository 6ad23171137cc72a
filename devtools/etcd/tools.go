//go:build tools

// etcd's server command (its module root is package main); imported so `go mod tidy` keeps its dependencies.
package tools

import _ "go.etcd.io/etcd/server/v3"
