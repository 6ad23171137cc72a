// CoreDNS for the real test nodes' cluster DNS (devtools/clusterdns.py), with only the plugins its Corefile uses:
// kubeadm's without forward and loop, there being no upstream here. The upstream build links every plugin, cloud
// DNS SDKs included.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives: upstream's order (core/dnsserver/zdirectives.go), kept to the plugins linked above.
var directives = []string{"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance", "cache",
	"kubernetes"}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
