// Command kube-controller-manager is the upstream Kubernetes controller manager
// (garbage collector, StatefulSet controller, ...), built from the published
// k8s.io/kubernetes module for the e2e-kube harness (e2e/kube/).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
