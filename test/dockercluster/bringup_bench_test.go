//go:build e2e

package dockercluster

import (
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkBringUp (make bench-failover): one bring-up of the three-node
// cluster with egressflow installed and Ready, from `Start` to the
// controller's second replica available. With BRINGUP_FRESH=1 it is what
// a new machine does: every egressflow image is removed from Docker (the
// node image, egressflow's and the test images) and the Kubernetes
// binaries and Go's build cache start empty (EGRESSFLOW_CACHE and GOCACHE
// in temporary directories, removed afterwards); only Go's module cache
// stays, so module downloads are not counted. Otherwise everything is
// cached.
func BenchmarkBringUp(b *testing.B) {
	fresh := os.Getenv("BRINGUP_FRESH") == "1"
	what := "cached"
	if fresh {
		what = "fresh"
		b.Setenv("EGRESSFLOW_CACHE", b.TempDir())
		b.Setenv("GOCACHE", b.TempDir())
		out, err := run("docker", "images", "--format", "{{.Repository}}:{{.Tag}}")
		if err != nil {
			b.Fatal(err)
		}
		for _, image := range strings.Fields(out) {
			if strings.HasPrefix(image, "egressflow") {
				if _, err := run("docker", "rmi", "-f", image); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for b.Loop() {
		start := time.Now()
		c := Start(b, Config{Nodes: 3})
		c.Install()
		took := time.Since(start)
		b.Logf("cluster bring-up, %s (3 nodes Ready, egressflow installed and Ready): %v", what, took.Round(time.Second))
		b.ReportMetric(took.Seconds(), what+"-s")
	}
}
