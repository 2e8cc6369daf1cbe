//go:build tools

// Package tools pins KAI Scheduler's fair-share simulators so that `go build
// github.com/NVIDIA/KAI-scheduler/cmd/<name>` builds them from this module.
package tools

import (
	_ "github.com/NVIDIA/KAI-scheduler/cmd/fairshare-simulator"
	_ "github.com/NVIDIA/KAI-scheduler/cmd/time-aware-simulator"
)
