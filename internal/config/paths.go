package config

import (
	"os"
	"path/filepath"
)

// StateRoot is where lever keeps host-side state for all instances: $LEVER_STATE_DIR, else
// $XDG_STATE_HOME/lever, else ~/.local/state/lever.
func StateRoot() string {
	if d := os.Getenv("LEVER_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "lever")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/var/lib"
	}
	return filepath.Join(home, ".local", "state", "lever")
}

// StateDir is this instance's host-side state directory (CA, broker pid/state/audit, backend
// files). `lever destroy` removes it whole, so everything lever makes on the host for an
// instance must live under it.
func (c *Config) StateDir() string { return filepath.Join(StateRoot(), c.Name) }
