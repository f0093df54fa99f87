package config

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
)

// Default is an example lever.yaml with every key at its default, commented. `lever`
// commands and the README quickstart can write it out as a starting point; it loads
// as-is once the API key file it names exists (mode 0600).
//
//go:embed lever.example.yaml
var Default []byte

// Load reads lever.yaml at path, decodes it strictly (an unknown key at any depth, or a
// value of the wrong type, is an error naming the key and its line), fills defaults and
// validates. The returned Config is ready to use; on error nothing is returned, so a bad
// file can never half-configure anything.
//
// The split follows Lima's pkg/limayaml: decode (decode.go), defaults (defaults.go),
// validate (validate.go).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load for bytes already read from path. path names the file in errors and
// anchors relative paths (tree, api_key_file, ...) at its directory.
func Parse(path string, data []byte) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config path %s: %w", path, err)
	}
	var c Config
	lines, probs := decode(path, data, &c)
	if len(probs) > 0 {
		return nil, probs
	}
	c.Path, c.Dir = abs, filepath.Dir(abs)
	applyDefaults(&c)
	if probs := validate(&c, path, lines); len(probs) > 0 {
		return nil, probs
	}
	return &c, nil
}

// HostPath resolves a host-side path written in lever.yaml (api_key_file, lev.image_tarball,
// lima.image, ...): "~/" is the user's home, a relative path is relative to the directory
// of lever.yaml, an absolute path is itself.
func (c *Config) HostPath(p string) string { return hostPath(c, p) }

// LoadIdentity loads lever.yaml for teardown (lever stop, lever destroy): it decodes as
// strictly as Load but validates only what names the instance and its backend (name,
// backend). A jail whose api_key_file or tree has since gone must still be removable;
// refusing to destroy it would leave a guest nobody can clean up with lever. TreePath is
// set when the tree still resolves.
func LoadIdentity(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config path %s: %w", path, err)
	}
	var c Config
	lines, probs := decode(path, data, &c)
	if len(probs) > 0 {
		return nil, probs
	}
	c.Path, c.Dir = abs, filepath.Dir(abs)
	applyDefaults(&c)
	v := &validator{file: path, lines: lines}
	v.identity(&c)
	if len(v.probs) > 0 {
		return nil, v.probs
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(c.Dir, c.Tree)); err == nil && !filepath.IsAbs(c.Tree) {
		c.TreePath = real
	}
	return &c, nil
}
