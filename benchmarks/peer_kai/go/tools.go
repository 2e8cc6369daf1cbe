//go:build tools

// Package tools pins KAI Scheduler's commands so that `go build github.com/NVIDIA/KAI-scheduler/cmd/<name>`
// builds them from this module.
package tools

import (
	_ "github.com/NVIDIA/KAI-scheduler/cmd/admission"
	_ "github.com/NVIDIA/KAI-scheduler/cmd/binder"
	_ "github.com/NVIDIA/KAI-scheduler/cmd/podgroupcontroller"
	_ "github.com/NVIDIA/KAI-scheduler/cmd/podgrouper"
	_ "github.com/NVIDIA/KAI-scheduler/cmd/queuecontroller"
	_ "github.com/NVIDIA/KAI-scheduler/cmd/scheduler"
)
