// Package version holds the build's version, set by the linker.
package version

// Version is overridden at link time: -ldflags "-X github.com/lever-jail/lever/internal/version.Version=v1.2.3".
var Version = "dev"
