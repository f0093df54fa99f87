// Package version holds the build's version, set by the linker (the Makefile's LDFLAGS).
// It owns that one string and must not import anything: every binary links it.
package version

// Version is overridden at link time: -ldflags "-X github.com/lever-jail/lever/internal/version.Version=v1.2.3".
var Version = "dev"
