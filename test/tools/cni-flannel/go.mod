// Module cni-flannel pins flannel's CNI plugin: it reads the node's subnet
// from flanneld (/run/flannel/subnet.env) and hands the pod to the bridge
// plugin with host-local addresses from it. Its last release inside the CNI
// project's plugins is v0.9.1 (later it moved to flannel-io/cni-plugin,
// which the Go module proxy does not serve). A separate module, so that
// the product go.mod never depends on it. Built by
// test/tools/build-binaries.sh --with-cluster into
// $EGRESSFLOW_CACHE/bin/cni-flannel-<version>.
module github.com/egressflow/egressflow/test/tools/cni-flannel

go 1.26.0

require github.com/containernetworking/plugins v0.9.1

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
