// Package templates holds the guest templates lever ships, embedded in the binary so that
// what is reviewed in the repository is exactly what lever renders. It holds bytes only:
// filling a template in and checking the result belong to the backend that uses it
// (internal/backend/lima), never here.
package templates

import _ "embed"

// LimaYAML is the text/template source of the Lima containment template
// (internal/backend/lima renders it).
//
//go:embed lima.yaml.tmpl
var LimaYAML string

// QemuTCG is a qemu-system-<arch> wrapper that forces TCG. Lima v1.x always picks
// accel=kvm on Linux; when lever's accelerator is tcg (see internal/backend/lima/accel.go),
// it writes this file into the instance's state dir and points QEMU_SYSTEM_<ARCH> at it.
//
//go:embed qemu-tcg.sh
var QemuTCG string
