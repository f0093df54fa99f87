package pipeline

import (
	"os"
	"path/filepath"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/readpaths"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// UserHome is the real home directory "~/" entries resolve against ($LEV_USER_HOME
// overrides it, for tests and for a daemon serving another user's tree).
func UserHome() string {
	h := os.Getenv("LEV_USER_HOME")
	if h == "" {
		h, _ = os.UserHomeDir()
	}
	if r, err := filepath.EvalSymlinks(h); err == nil {
		return r
	}
	return h
}

// BuildFS binds a blueprint's declarations and the config's grants to a workdir.
func BuildFS(bp *blueprint.Blueprint, cfg *levconfig.Config, workdir, home string) (*workfs.FS, []readpaths.Status, error) {
	fsys, err := workfs.New(bp.Installed, workdir, nil)
	if err != nil {
		return nil, nil, err
	}
	sts := ResolveGrants(bp, cfg)
	fenced := sts
	if bp.Foreign {
		// Nothing a tree blueprint declares is ever granted, so its reads outside the
		// workdir are plain outside-the-workdir refusals, not "not granted" ones that
		// stop the run for a grant (and a lev resume) that can never come.
		fenced = nil
	}
	fence, err := readpaths.NewFence(bp.Installed, fenced, home, fsys.Workdir)
	if err != nil {
		return nil, nil, err
	}
	fsys.Fence = fence
	return fsys, sts, nil
}

// ResolveGrants is the one place a blueprint's declarations meet the config's grants (the
// fence, the taint gate and lev validate all use it). [agent_read_paths.NAME] applies by
// the name the blueprint is installed under (bp.Installed), never by the name it gives
// itself; a blueprint run by its path from outside the agents directory has no install
// name and gets only the machine-wide grants.
func ResolveGrants(bp *blueprint.Blueprint, cfg *levconfig.Config) []readpaths.Status {
	g := cfg.Grants
	if bp.Foreign {
		// Somebody else's blueprint (from the tree): what it declares is never granted,
		// not by [security] read_paths nor by allow_blueprint_read_paths.
		g = readpaths.Grants{}
	}
	if bp.Installed == "" {
		g.Agent = nil
	}
	return readpaths.Resolve(bp.Installed, bp.Declared, g)
}
