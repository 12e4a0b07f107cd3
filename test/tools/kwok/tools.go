//go:build tools

// Package tools pins kwok, which plays the kubelets of thousands of nodes
// in make bench-scale (test/tools/build-binaries.sh --with-kwok builds it).
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
