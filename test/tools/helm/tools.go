//go:build tools

// Package tools only records which command this module builds (helm), so
// that `go mod tidy` keeps its dependencies.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
