//go:build tools

// Package tools pins flanneld, the pod network's daemon of the clusters in
// Docker that run flannel (test/dockercluster, Config.PodNetwork);
// test/tools/build-binaries.sh --with-cluster builds it.
package tools

import _ "github.com/flannel-io/flannel"
