// Package sandbox runs lev's tool commands in a container, a namespace, or on the host.
//
// It owns the [sandbox] settings (validation, Merge), the executors and the Manager of a
// run's warm containers. It must not decide whether a command may run (the pipeline's
// permission and taint steps do that), and must never loosen what the user set: a
// blueprint's [sandbox] only tightens it.
package sandbox

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

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

// Kinds and on_unavailable values.
const (
	KindContainer = "container"
	KindNamespace = "namespace"
	KindNone      = "none"

	OnUnavailableError = "error"
	OnUnavailableWarn  = "warn"
)

// Keys are the only keys a [sandbox] table accepts.
var Keys = []string{"kind", "engine", "image", "network", "mount", "mounts", "persist", "on_unavailable"}

// FieldError names the key a bad [sandbox] value is under, so a loader can add its line.
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return fmt.Sprintf("sandbox key %q: %s", e.Key, e.Msg) }

// CheckKeys refuses any key of a decoded [sandbox] table that docs/lev-security.md
// ("Sandboxes") does not define, for loaders that decode into a map first. A misspelt "netwrok = false" must fail rather
// than leave the sandbox looser than the file reads.
func CheckKeys(table map[string]any) error {
	var bad []string
	for k := range table {
		if !isKey(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return &FieldError{Key: bad[0], Msg: fmt.Sprintf("unknown key (a [sandbox] table accepts only %s)", strings.Join(Keys, ", "))}
}

func isKey(k string) bool {
	for _, x := range Keys {
		if x == k {
			return true
		}
	}
	return false
}

// Validate checks the values of one table (agent, stage or user level). It returns a
// *FieldError naming the key.
func (c Config) Validate() error {
	switch c.Kind {
	case "", KindContainer, KindNamespace, KindNone:
	default:
		return &FieldError{"kind", fmt.Sprintf("%q is not container, namespace or none", c.Kind)}
	}
	switch c.OnUnavailable {
	case "", OnUnavailableError, OnUnavailableWarn:
	default:
		return &FieldError{"on_unavailable", fmt.Sprintf("%q is not error or warn", c.OnUnavailable)}
	}
	if c.Engine != "" && (strings.ContainsAny(c.Engine, " \t\n") || strings.HasPrefix(c.Engine, "-")) {
		return &FieldError{"engine", fmt.Sprintf("%q is not an engine name", c.Engine)}
	}
	if c.Image != "" && (strings.HasPrefix(c.Image, "-") || strings.ContainsAny(c.Image, " \t\n")) {
		return &FieldError{"image", fmt.Sprintf("%q is not an image reference", c.Image)}
	}
	if c.Mount != "" && len(c.Mounts) > 0 {
		return &FieldError{"mount", "set mount or mounts, not both"}
	}
	for i, m := range c.AllMounts() {
		key := "mount"
		if c.Mount == "" {
			key = fmt.Sprintf("mounts[%d]", i)
		}
		if _, err := ParseMount(m); err != nil {
			return &FieldError{key, err.Error()}
		}
	}
	return nil
}

// AllMounts is mount and mounts as one list.
func (c Config) AllMounts() []string {
	if c.Mount != "" {
		return []string{c.Mount}
	}
	return c.Mounts
}

// NetworkOn is the network setting with its default (on) applied.
func (c Config) NetworkOn() bool { return c.Network == nil || *c.Network }

// PersistOn is persist with its default (off) applied.
func (c Config) PersistOn() bool { return c.Persist != nil && *c.Persist }

// Mount is one extra bind mount, written "SRC[:DST][:ro|:rw]"; DST defaults to SRC.
type Mount struct {
	Src, Dst string
	ReadOnly bool
}

// ParseMount reads a mount entry. Both paths must be absolute and clean, so a mount
// cannot smuggle in a relative or ".." path, nor an engine flag.
func ParseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	var m Mount
	switch {
	case len(parts) == 1:
		m = Mount{Src: parts[0], Dst: parts[0]}
	case len(parts) == 2 && (parts[1] == "ro" || parts[1] == "rw"):
		m = Mount{Src: parts[0], Dst: parts[0], ReadOnly: parts[1] == "ro"}
	case len(parts) == 2:
		m = Mount{Src: parts[0], Dst: parts[1]}
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		m = Mount{Src: parts[0], Dst: parts[1], ReadOnly: parts[2] == "ro"}
	default:
		return Mount{}, fmt.Errorf("mount %q: want SRC[:DST][:ro|:rw]", s)
	}
	for _, p := range []string{m.Src, m.Dst} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, ",\n") {
			return Mount{}, fmt.Errorf("mount %q: %q must be an absolute, clean path", s, p)
		}
	}
	return m, nil
}

func (m Mount) String() string {
	mode := "rw"
	if m.ReadOnly {
		mode = "ro"
	}
	return m.Src + ":" + m.Dst + ":" + mode
}

// Overlay applies a stage's [stages.X.sandbox] over the agent's [sandbox], both from the
// same blueprint: every key the stage sets replaces the agent's. (The result still goes
// through Merge with the user's settings.)
func Overlay(agent, stage Config) Config {
	out := agent
	if stage.Kind != "" {
		out.Kind = stage.Kind
	}
	if stage.Engine != "" {
		out.Engine = stage.Engine
	}
	if stage.Image != "" {
		out.Image = stage.Image
	}
	if stage.Network != nil {
		out.Network = stage.Network
	}
	if stage.Mount != "" || len(stage.Mounts) > 0 {
		out.Mount, out.Mounts = stage.Mount, stage.Mounts
	}
	if stage.Persist != nil {
		out.Persist = stage.Persist
	}
	if stage.OnUnavailable != "" {
		out.OnUnavailable = stage.OnUnavailable
	}
	return out
}

func kindRank(k string) int {
	switch k {
	case KindContainer:
		return 2
	case KindNamespace:
		return 1
	}
	return 0
}

func boolp(b bool) *bool { return &b }

// Merge combines the user's [sandbox] (config.toml) with a blueprint's (already overlaid
// for the stage). The blueprint can tighten, never loosen, and never picks the engine
// binary:
//   - kind: the stronger of the two (none < namespace < container);
//   - engine: the user's, always; a blueprint's engine is ignored;
//   - image: the user's when set, else the blueprint's;
//   - network: off if either turns it off;
//   - mounts: only the user's; a blueprint may make one of them read-only, and a mount the
//     user did not list is dropped;
//   - persist: on only if both want it;
//   - on_unavailable: warn only if the user chose warn and the blueprint did not say error.
//
// Notes say what was ignored or clamped, for the run log and lev validate.
func Merge(user, bp Config) (Config, []string) {
	var notes []string
	out := Config{Engine: user.Engine}
	if bp.Engine != "" && bp.Engine != user.Engine {
		notes = append(notes, fmt.Sprintf("blueprint sandbox engine %q ignored: the engine comes from your config only", bp.Engine))
	}

	out.Kind = user.Kind
	if kindRank(bp.Kind) > kindRank(user.Kind) {
		out.Kind = bp.Kind
	} else if bp.Kind != "" && kindRank(bp.Kind) < kindRank(user.Kind) {
		notes = append(notes, fmt.Sprintf("blueprint sandbox kind %q cannot loosen your %q; using %q", bp.Kind, user.Kind, user.Kind))
	}
	if out.Kind == "" {
		out.Kind = KindNone
	}

	out.Image = user.Image
	if out.Image == "" {
		out.Image = bp.Image
	} else if bp.Image != "" && bp.Image != user.Image {
		notes = append(notes, fmt.Sprintf("blueprint sandbox image %q ignored: your config sets %q", bp.Image, user.Image))
	}

	out.Network = boolp(user.NetworkOn() && bp.NetworkOn())
	if user.Network != nil && !*user.Network && bp.Network != nil && *bp.Network {
		notes = append(notes, "blueprint sandbox network = true cannot loosen your network = false")
	}

	bpMounts := map[string]Mount{}
	for _, s := range bp.AllMounts() {
		if m, err := ParseMount(s); err == nil {
			bpMounts[m.Src+"\x00"+m.Dst] = m
		}
	}
	for _, s := range user.AllMounts() {
		m, err := ParseMount(s)
		if err != nil {
			continue
		}
		k := m.Src + "\x00" + m.Dst
		if b, ok := bpMounts[k]; ok {
			m.ReadOnly = m.ReadOnly || b.ReadOnly
			delete(bpMounts, k)
		}
		out.Mounts = append(out.Mounts, m.String())
	}
	var dropped []string
	for _, m := range bpMounts {
		dropped = append(dropped, m.String())
	}
	sort.Strings(dropped)
	for _, d := range dropped {
		notes = append(notes, fmt.Sprintf("blueprint sandbox mount %q dropped: only mounts your config lists can be used", d))
	}

	out.Persist = boolp(user.PersistOn() && (bp.Persist == nil || *bp.Persist))
	if !user.PersistOn() && bp.PersistOn() {
		notes = append(notes, "blueprint sandbox persist = true ignored: your config does not enable persist")
	}

	out.OnUnavailable = OnUnavailableError
	if user.OnUnavailable == OnUnavailableWarn && bp.OnUnavailable != OnUnavailableError {
		out.OnUnavailable = OnUnavailableWarn
	}
	if bp.OnUnavailable == OnUnavailableWarn && user.OnUnavailable != OnUnavailableWarn {
		notes = append(notes, `blueprint sandbox on_unavailable = "warn" cannot loosen your "error"`)
	}
	return out, notes
}
