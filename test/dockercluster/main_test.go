//go:build e2e || demo

package dockercluster

import (
	"os"
	"testing"
)

// TestMain removes, once every test has run, the assets the clusters of
// this process shared (clusterAssets).
func TestMain(m *testing.M) {
	code := m.Run()
	removeSharedAssets()
	os.Exit(code)
}
