//go:build tools

// Package tools only records that this module builds the etcd server, so that
// `go mod tidy` keeps its dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
)
