package config

import (
	"os"
	"path/filepath"
	"strings"
)

// resolution is what resolve found that validate needs to word its problems: the
// spelling lever.yaml gave a path (made absolute) before its symlinks were followed, and
// why a path would not resolve. It is read by validate and then dropped.
type resolution struct {
	// treeErr is why the tree did not resolve (TreePath stays empty).
	treeErr error
	// written is a lev setting's absolute path before symlinks, by dotted key.
	written map[string]string
	// errs is why a lev setting did not resolve, by dotted key (the field keeps the
	// absolute path as written).
	errs map[string]error
	// configReal is this file's path through its symlinks (empty if it did not resolve).
	configReal string
	// configAtRoot is set when this file's name is at the tree's root but is not a
	// regular file there (a symlink): the name the agents could replace.
	configAtRoot string
}

// resolve rewrites every host path in c once, so that every consumer (and validate)
// reads one absolute path: "~/" is the user's home and a relative path is relative to
// the directory of lever.yaml (hostPath). The tree and lev's settings are also followed
// through symlinks here, and validate checks those resolved paths: what is checked is
// what is read, with no second lookup an agent could race. resolve reports nothing:
// a path that will not resolve is left as written, and validate says why.
func resolve(c *Config) resolution {
	r := resolution{written: map[string]string{}, errs: map[string]error{}}

	// An absolute tree is refused by validate; teardown (LoadIdentity) still gets
	// TreePath for any relative tree that exists, so it can refuse to remove it.
	if !filepath.IsAbs(c.Tree) {
		real, err := filepath.EvalSymlinks(filepath.Join(c.Dir, c.Tree))
		if err == nil {
			c.TreePath = real
		} else {
			r.treeErr = err
		}
	}

	// Where lever.yaml itself lies. With tree: . its name is at the tree's root, where the
	// agents could replace it (a symlink there too); otherwise it may still resolve into
	// the tree through a symlink. validate judges both.
	if real, err := filepath.EvalSymlinks(c.Path); err == nil {
		r.configReal = real
	}
	if dir, err := filepath.EvalSymlinks(c.Dir); err == nil && c.TreePath != "" && dir == c.TreePath {
		name := filepath.Base(c.Path)
		// Not there at all: the bytes came from elsewhere (Parse), nothing to protect.
		if st, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			if st.Mode().IsRegular() {
				c.ConfigInTree = name
			} else {
				r.configAtRoot = filepath.Join(dir, name)
			}
		}
	}

	if c.Broker.APIKeyFile != "" {
		c.Broker.APIKeyFile = c.APIKeyPath()
	}
	for _, p := range []*string{&c.Lev.ImageTarball, &c.Lev.BaseTarball, &c.Lima.Image, &c.Lima.Kernel, &c.Lima.Initrd} {
		if *p != "" {
			*p = hostPath(c, *p)
		}
	}
	// A limactl given as a path is a host path like the others; a bare name is looked up
	// on PATH by the lima backend.
	if strings.ContainsRune(c.Lima.Limactl, '/') {
		c.Lima.Limactl = hostPath(c, c.Lima.Limactl)
	}

	for _, s := range []struct {
		key string
		p   *string
	}{{"lev.config", &c.Lev.Config}, {"lev.agents", &c.Lev.Agents}, {"lev.policy", &c.Lev.Policy}} {
		if *s.p == "" {
			continue
		}
		abs := hostPath(c, *s.p)
		r.written[s.key] = abs
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			r.errs[s.key] = err
			*s.p = abs
			continue
		}
		*s.p = real
	}
	return r
}

// hostPath resolves a host-side path from lever.yaml: ~/ is the user's home, a relative
// path is relative to the directory of lever.yaml.
func hostPath(c *Config, p string) string {
	if strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(c.Dir, p)
}
