// Package sandbox runs lev's tool commands in a container, a namespace, or on the host.
package sandbox

// Config is a [sandbox] table, at agent or stage level. Only these keys exist; a
// blueprint or config with any other key fails to load, naming it.
type Config struct {
	Kind          string   `toml:"kind"`   // container | namespace | none
	Engine        string   `toml:"engine"` // podman, docker, any Docker-CLI-compatible
	Image         string   `toml:"image"`
	Network       *bool    `toml:"network"` // nil = unset (inherit)
	Mount         string   `toml:"mount"`
	Mounts        []string `toml:"mounts"`
	Persist       *bool    `toml:"persist"`
	OnUnavailable string   `toml:"on_unavailable"` // error (default) | warn
}
