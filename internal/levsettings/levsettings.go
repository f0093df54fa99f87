// Package levsettings is the user's lev settings as lever pushes them into the jail: lev's
// config.toml (lev.config), a directory of blueprints (lev.agents) and the taint policy
// (lev.policy), all host files outside the tree. Load reads and validates them with lev's
// own strict loaders, so a bad file fails `lever up` and `lever apply --dry-run` on the
// host, naming the file, key and line, before anything in the guest changes. The bundle
// reaches the guest only through the enrolment helper's stdin.
//
// It must not read a path config did not resolve and check (config owns where the files
// are and that they are outside the tree), and must not write anything.
package levsettings

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/policy"
)

// MaxBytes caps the whole bundle (every file's bytes): it crosses to the guest on one
// helper's stdin, and settings are small text files.
const MaxBytes = 4 << 20

// Files in an agent's enrolment dir (lev sees them under /run/lever).
const (
	FileConfig = "config.toml"
	DirAgents  = "agents"
	FilePolicy = "policy.toml"
	// FileHash holds the bundle's Hash, written last: observe compares it with the host's.
	FileHash = "settings.sha256"
)

// Bundle is the settings as pushed. Agents maps a slash path relative to the agents dir
// to the file's contents.
type Bundle struct {
	Config    []byte            `json:"config"`
	Agents    map[string][]byte `json:"agents"`
	Policy    []byte            `json:"policy,omitempty"`
	HasPolicy bool              `json:"has_policy"`
}

// Paths are the host paths from lever.yaml (absolute and resolved by config.Load; empty
// when unset).
type Paths struct {
	Config, Agents, Policy string
}

// Load reads and validates the settings. Errors name the lever.yaml key, then lev's
// loader's own file:line: key message.
func Load(p Paths) (*Bundle, error) {
	b := &Bundle{Agents: map[string][]byte{}}
	total := 0
	read := func(key, file string) ([]byte, error) {
		data, err := readRegular(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if total += len(data); total > MaxBytes {
			return nil, fmt.Errorf("%s: %s: lev settings exceed %d bytes in all (they are pushed into the jail on every change)", key, file, MaxBytes)
		}
		return data, nil
	}
	if p.Config != "" {
		data, err := read("lev.config", p.Config)
		if err != nil {
			return nil, err
		}
		cfg, err := levconfig.Parse(p.Config, data)
		if err != nil {
			return nil, fmt.Errorf("lev.config: %w", err)
		}
		// In the jail the policy file is lever's to place (lev.policy): a policy_file
		// naming a path in the container could name one in the tree, which the agents
		// write.
		if cfg.Security.PolicyFile != "" {
			return nil, fmt.Errorf("lev.config: %s: security.policy_file: not used in the jail; set lev.policy in lever.yaml to the policy file's host path instead", p.Config)
		}
		b.Config = data
	}
	if p.Agents != "" {
		err := filepath.WalkDir(p.Agents, func(file string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(p.Agents, file)
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				// A link could lead into the tree; copy only what is plainly here.
				return fmt.Errorf("%s is a symlink: lev.agents must hold plain files and directories", file)
			case d.IsDir():
				return nil
			case !d.Type().IsRegular():
				return fmt.Errorf("%s is not a regular file", file)
			}
			data, err := read("lev.agents", file)
			if err != nil {
				return err
			}
			slash := filepath.ToSlash(rel)
			if isBlueprint(slash) {
				if _, err := blueprint.Parse(file, data, pipeline.Known); err != nil {
					return err
				}
			}
			b.Agents[slash] = data
			return nil
		})
		if err != nil {
			if strings.HasPrefix(err.Error(), "lev.agents: ") {
				return nil, err
			}
			return nil, fmt.Errorf("lev.agents: %w", err)
		}
	}
	if p.Policy != "" {
		data, err := read("lev.policy", p.Policy)
		if err != nil {
			return nil, err
		}
		if _, err := policy.Parse(data, p.Policy); err != nil {
			return nil, fmt.Errorf("lev.policy: %w", err)
		}
		b.Policy, b.HasPolicy = data, true
	}
	return b, nil
}

// isBlueprint: lev finds agent NAME as NAME.toml or NAME/blueprint.toml in its agents
// dir; other files there (seed files a blueprint reads) are data.
func isBlueprint(rel string) bool {
	dir, base := path.Split(rel)
	if dir == "" {
		return strings.HasSuffix(base, ".toml")
	}
	return base == "blueprint.toml" && strings.Count(dir, "/") == 1
}

// readRegular reads a regular file that has one name: a hard link could be a file in the
// tree under another name, and nothing about the path would show it.
func readRegular(file string) ([]byte, error) {
	st, err := os.Lstat(file)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", file)
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok && s.Nlink > 1 {
		return nil, fmt.Errorf("%s has %d hard links; it could be a file in the tree under another name: copy it instead", file, s.Nlink)
	}
	return os.ReadFile(file)
}

// Hash identifies the bundle: what observe compares with the hash file in the guest, and
// what the lev containers carry, so a change re-pushes and restarts them.
func (b *Bundle) Hash() string {
	h := sha256.New()
	field := func(tag string, data []byte) {
		h.Write([]byte(tag))
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(data)))
		h.Write(n[:])
		h.Write(data)
	}
	field("lever-lev-settings/1 config", b.Config)
	names := make([]string, 0, len(b.Agents))
	for n := range b.Agents {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		field("agent "+n, b.Agents[n])
	}
	if b.HasPolicy {
		field("policy", b.Policy)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CheckRelative refuses an agents-dir path that could leave the dir it is written under
// (the guest side checks every name it is sent).
func CheckRelative(rel string) error {
	if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || rel == "." || strings.HasPrefix(rel, "../") || rel == ".." || strings.Contains(rel, "\x00") {
		return fmt.Errorf("bad settings path %q", rel)
	}
	return nil
}
