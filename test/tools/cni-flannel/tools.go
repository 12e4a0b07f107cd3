//go:build tools

// Package tools pins flannel's CNI plugin, which the clusters in Docker
// that run flannel (test/dockercluster, Config.PodNetwork) call for every pod;
// test/tools/build-binaries.sh --with-cluster builds it.
package tools

import _ "github.com/containernetworking/plugins/plugins/meta/flannel"
