// Command kube-apiserver is the upstream Kubernetes API server, built from the
// published k8s.io/kubernetes module for the e2e-kube harness (e2e/kube/).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
