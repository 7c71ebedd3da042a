// The containerd shim for gVisor, as gVisor's own (gvisor.dev/gvisor/shim), plus the restore extension:
// a pod that names a checkpoint comes up restored from it instead of started fresh.
package main

import (
	_ "agentsession.dev/devcluster/gvisor-tools/restoreext"
	"gvisor.dev/gvisor/shim/v1/cli"
)

func main() {
	cli.Main()
}
