// Command etcd is the etcd v3.6.5 server for the kind node's control-plane image, built from
// the Go module proxy (e2e/kind/tools.py). `go install go.etcd.io/etcd/server/v3@v3.6.5` is
// refused because etcd's own go.mod carries replace directives; this wrapper module is not.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
