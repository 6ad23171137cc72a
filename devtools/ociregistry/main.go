// Command ociregistry: the container registry the real-node tests pull from, and the pusher that fills it. Both are
// go-containerregistry's (its registry handler, in memory, and crane): nothing here speaks the registry protocol.
//
//	ociregistry serve [-listen 0.0.0.0:0]   prints the address it listens on, then serves until it is killed
//	ociregistry push ARCHIVE REF            pushes the one image of a `docker save` archive to REF (plain HTTP)
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ociregistry serve [-listen ADDR] | ociregistry push ARCHIVE REF")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "serve":
		flags := flag.NewFlagSet("serve", flag.ExitOnError)
		listen := flags.String("listen", "127.0.0.1:0", "the address to listen on (port 0: a free one)")
		_ = flags.Parse(os.Args[2:])
		listener, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Fatalf("ociregistry: listening on %s: %v", *listen, err)
		}
		fmt.Println(listener.Addr().String())
		handler := registry.New(registry.Logger(log.New(os.Stderr, "", log.LstdFlags)))
		log.Fatal((&http.Server{Handler: handler}).Serve(listener))
	case "push":
		if len(os.Args) != 4 {
			usage()
		}
		image, err := crane.Load(os.Args[2])
		if err != nil {
			log.Fatalf("ociregistry: loading %s: %v", os.Args[2], err)
		}
		if err := crane.Push(image, os.Args[3], crane.Insecure); err != nil {
			log.Fatalf("ociregistry: pushing %s: %v", os.Args[3], err)
		}
	default:
		usage()
	}
}
