package topology

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/knftables"
)

// NFTables returns a knftables interface of one table in the node's
// namespace, as the agent gets one on a real node: knftables runs the nft
// binary it finds on PATH, so this makes it find a wrapper that runs the
// host's nft inside the node's namespace. The table goes with the
// namespace when the test ends.
func (n *Node) NFTables(t testing.TB, family knftables.Family, table string) knftables.Interface {
	t.Helper()
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Fatalf("nft (Debian's nftables, which make test-deps installs): %v", err)
	}
	dir := t.TempDir()
	wrapper := "#!/bin/sh\nexec ip netns exec " + n.Netns + " " + nft + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "nft"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	// knftables resolves "nft" on PATH once, in New; the PATH is put back
	// at once (tests here do not run in parallel).
	path := os.Getenv("PATH")
	os.Setenv("PATH", dir+string(os.PathListSeparator)+path)
	iface, err := knftables.New(family, table)
	os.Setenv("PATH", path)
	if err != nil {
		t.Fatalf("nftables in %s's namespace: %v", n.Name, err)
	}
	return iface
}
