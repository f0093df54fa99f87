package blueprint

import (
	"fmt"
	"path/filepath"
)

// InstallName is the name a blueprint file is installed under in the agents directory:
// NAME for agents/NAME.toml or agents/NAME/blueprint.toml, the name `lev run NAME` finds
// it by. It is "" for a file anywhere else (run by its path).
//
// Per-agent grants ([agent_read_paths.NAME]) are keyed on this name, never on the name a
// blueprint gives itself: a downloaded blueprint can write name = "cto" into its own file,
// but only the user decides where it is installed.
func InstallName(agentsDir, file string) string {
	if agentsDir == "" || file == "" {
		return ""
	}
	// Lexically first (agents/cto may be a directory link the user made), then with the
	// directories' symlinks resolved (the agents directory itself may be reached by a link).
	if n := installName(abs(agentsDir), abs(file)); n != "" {
		return n
	}
	dir := abs(agentsDir)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	return installName(dir, resolveDir(file))
}

func installName(dir, f string) string {
	base := filepath.Base(f)
	switch parent := filepath.Dir(f); {
	case parent == dir && filepath.Ext(base) == ".toml":
		name := base[:len(base)-len(".toml")]
		if nameRe.MatchString(name) {
			return name
		}
	case base == "blueprint.toml" && filepath.Dir(parent) == dir:
		if name := filepath.Base(parent); nameRe.MatchString(name) {
			return name
		}
	}
	return ""
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// resolveDir is p, absolute, with the symlinks of its directory resolved (not of its last
// element: agents/cto.toml may be a link the user made to a file elsewhere, and it is then
// installed as cto).
func resolveDir(p string) string {
	d, b := filepath.Split(abs(p))
	if r, err := filepath.EvalSymlinks(d); err == nil {
		d = r
	}
	return filepath.Join(d, b)
}

// Install sets bp.Installed from where the file sits in agentsDir, and refuses a blueprint
// installed under one name that calls itself another: which grants it gets must never
// depend on a name the file chose for itself.
func Install(agentsDir string, bp *Blueprint) error {
	bp.Installed = InstallName(agentsDir, bp.File)
	if bp.Installed != "" && bp.Installed != bp.Name {
		return fmt.Errorf("blueprint %s calls itself %q but is installed as %q: grants ([agent_read_paths.%s]) go by the installed name, so lev refuses the mismatch; set name = %q in the file, or install it as %s",
			bp.File, bp.Name, bp.Installed, bp.Installed, bp.Installed, bp.Name)
	}
	return nil
}
