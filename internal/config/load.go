package config

import (
	_ "embed"
	"fmt"
	"path/filepath"

	"github.com/lever-jail/lever/internal/beneath"
)

// Default is an example lever.yaml with every key at its default, commented. `lever`
// commands and the README quickstart can write it out as a starting point; it loads
// as-is once the API key file it names exists (mode 0600).
//
//go:embed lever.example.yaml
var Default []byte

// Load reads lever.yaml at path, decodes it strictly (an unknown key at any depth, or a
// value of the wrong type, is an error naming the key and its line), fills defaults,
// resolves its host paths and validates. The returned Config is ready to use; on error
// nothing is returned, so a bad file can never half-configure anything.
//
// The split follows Lima's pkg/limayaml, one step per file: decode (decode.go), defaults
// (defaults.go), resolve (resolve.go: the only step that rewrites a path), validate
// (validate.go: reads and reports, never rewrites).
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// MaxFile caps lever.yaml. It may lie in the tree the agents write: a huge, sparse or
// endless file (a FIFO, a device) is refused, naming it and the cap, before it is read.
const MaxFile = 1 << 20

// ReadFile reads a lever.yaml: a regular file of at most MaxFile bytes, never waited on.
func ReadFile(path string) ([]byte, error) {
	data, err := beneath.ReadFile(path, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return data, nil
}

// Parse is Load for bytes already read from path. path names the file in errors and
// anchors relative paths (tree, api_key_file, ...) at its directory.
func Parse(path string, data []byte) (*Config, error) {
	return parse(path, data, validate)
}

// ParseState is Parse for the commands that only read or drive the jail as it is (ps,
// logs, result, run, shell, the broker's and egress's): a problem in the tree's contents
// (Problem.Tree: a blueprint or a worker's dir swapped for a link out of the tree, which
// any agent can do) does not refuse them, or an agent could lock the person out of the
// jail it runs in. Those problems come back as warnings, naming the file; every other
// problem is an error as for Parse. lever up and apply use Parse and refuse them.
func ParseState(path string, data []byte) (*Config, Problems, error) {
	var warn Problems
	c, err := parse(path, data, func(c *Config, file string, lines keyLines, r resolution) Problems {
		var hard Problems
		for _, p := range validate(c, file, lines, r) {
			if p.Tree {
				warn = append(warn, p)
			} else {
				hard = append(hard, p)
			}
		}
		return hard
	})
	if err != nil {
		// Refused for another problem: report the tree's with it, all in one.
		if ps, ok := err.(Problems); ok {
			return nil, nil, append(ps, warn...)
		}
		return nil, nil, err
	}
	return c, warn, nil
}

// parse runs the steps Load and LoadIdentity share, then check: the full validation, or
// only the instance's identity.
func parse(path string, data []byte, check func(*Config, string, keyLines, resolution) Problems) (*Config, error) {
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
	r := resolve(&c)
	if probs := check(&c, path, lines, r); len(probs) > 0 {
		return nil, probs
	}
	return &c, nil
}

// HostPath resolves a host-side path written in lever.yaml (api_key_file, lev.image_tarball,
// lima.image, ...): "~/" is the user's home, a relative path is relative to the directory
// of lever.yaml, an absolute path is itself.
func (c *Config) HostPath(p string) string { return hostPath(c, p) }

// APIKeyPath is the absolute host path of the broker's API key file (broker.api_key_file
// resolved as HostPath resolves it), "" when none is set. Every reader of the key file
// takes its path from here, whether or not the Config came through Load.
func (c *Config) APIKeyPath() string {
	if c.Broker.APIKeyFile == "" {
		return ""
	}
	return hostPath(c, c.Broker.APIKeyFile)
}

// LoadIdentity loads lever.yaml for teardown (lever stop, lever destroy): it decodes as
// strictly as Load but validates only what names the instance and its backend (name,
// backend). A jail whose api_key_file or tree has since gone must still be removable;
// refusing to destroy it would leave a guest nobody can clean up with lever. TreePath is
// set when the tree still resolves.
func LoadIdentity(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseIdentity(path, data)
}

// ParseIdentity is LoadIdentity for bytes already read from path.
func ParseIdentity(path string, data []byte) (*Config, error) {
	return parse(path, data, func(c *Config, file string, lines keyLines, _ resolution) Problems {
		v := &validator{file: file, lines: lines}
		v.identity(c)
		return v.probs
	})
}
