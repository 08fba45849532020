//go:build tools

// Package tools only records the buildx CLI as a dependency of this module.
package tools

import _ "github.com/docker/buildx/cmd/buildx"
