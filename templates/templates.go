// Package templates holds the guest templates lever ships, embedded in the binary so that
// what is reviewed in the repository is exactly what lever renders.
package templates

import _ "embed"

// LimaYAML is the text/template source of the Lima containment template
// (internal/backend/lima renders it).
//
//go:embed lima.yaml.tmpl
var LimaYAML string

// QemuTCG is a qemu-system-x86_64 wrapper that forces TCG. Lima v1.x picks accel=kvm
// whenever /dev/kvm exists; on hosts whose KVM cannot run a stock guest kernel (PVM),
// lever writes this file into the instance's state dir and points QEMU_SYSTEM_X86_64 at it.
//
//go:embed qemu-tcg.sh
var QemuTCG string
