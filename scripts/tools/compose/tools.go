//go:build tools

// Package tools only records the compose CLI as a dependency of this module.
package tools

import _ "github.com/docker/compose/v5/cmd"
