//go:build tools

// Package tools pins KWOK so that `go build sigs.k8s.io/kwok/cmd/kwok` builds it from this module.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
