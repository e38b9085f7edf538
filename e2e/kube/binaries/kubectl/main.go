// Command kubectl is the upstream Kubernetes CLI at the same version as the API server,
// built from the published k8s.io/kubectl module for the e2e-kube harness (e2e/kube/).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
	os.Exit(0)
}
