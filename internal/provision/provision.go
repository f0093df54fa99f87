// Package provision prepares a guest for lev: the packages the jail needs, the run user with
// subordinate ids and lingering, the sysctls rootless podman needs, the run user's podman
// engine settings, and a root-owned stamp naming the provisioning script's hash and the
// boot it ran in. The stamp lets a re-run skip package installs; it never stands in for the
// firewall check, which every bring-up makes regardless (internal/egress, internal/guest).
// It must not touch the firewall, the broker or lev's containers.
package provision

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
)

//go:embed provision.sh
var script string

// StampPart defines read_stamp, the shell function that reads the stamp (ReadCmd runs it
// alone; bring-up's observation call folds it in).
//
//go:embed stamp.sh
var StampPart string

// Script returns the embedded provisioning script.
func Script() string { return script }

// DefaultPackages are what the jail needs: iptables for LEVER_EGRESS, nftables for reading
// it back on nf_tables guests (a rule `iptables -S` cannot print; verification fails closed
// without nft), podman and uidmap for the run user's rootless containers, and a rootless
// network helper (pasta, else slirp4netns); and what the default workbench image is made
// of beyond Debian's essential set (git, make, CA roots: see levimage.WorkbenchPackages;
// installed here, from the guest's configured sources, because nothing is downloaded
// inside the jail).
var DefaultPackages = []string{"iptables", "nftables", "podman", "uidmap", "passt|slirp4netns", "runc|crun", "git", "make", "ca-certificates"}

// DefaultStamp is the stamp's place in a VM guest.
const DefaultStamp = "/var/lib/lever/provision.stamp"

// Params are the provisioning inputs; all of them enter the hash.
type Params struct {
	RunUser  string
	Packages []string
	Stamp    string
	// SysctlFile persists the sysctls across guest reboots (empty on the netns substrate,
	// whose "guest" is the host: lever sets them for the boot only and writes no host file).
	SysctlFile string
}

// WithDefaults fills the defaults (run user lever, DefaultPackages, DefaultStamp).
func (p Params) WithDefaults() Params { return p.withDefaults() }

func (p Params) withDefaults() Params {
	if p.RunUser == "" {
		p.RunUser = "lever"
	}
	if p.Packages == nil {
		p.Packages = DefaultPackages
	}
	if p.Stamp == "" {
		p.Stamp = DefaultStamp
	}
	return p
}

// Hash names the exact script and parameters.
func (p Params) Hash() string {
	p = p.withDefaults()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", script, p.RunUser, strings.Join(p.Packages, " "), p.SysctlFile)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// State is the guest's provisioning state as read in one guest call.
type State struct {
	StampHash string
	StampBoot string
	BootID    string
	StampOK   bool // root-owned, not group/world writable
}

// Current reports whether the stamp names this script's hash and the current boot.
func (s State) Current(p Params) bool {
	return s.StampOK && s.StampHash == p.Hash() && s.StampBoot != "" && s.StampBoot == s.BootID
}

// ReadCmd is the one guest command that reads the stamp, its owner and mode, and the boot id.
// It is separate from Run so a caller can fold it into a larger snapshot call.
func ReadCmd(p Params) guest.Cmd {
	p = p.withDefaults()
	return guest.Cmd{As: guest.Root, Argv: []string{"/bin/sh", "-c", StampPart + `read_stamp "$1"`, "sh", p.Stamp}}
}

// ParseState parses ReadCmd's output.
func ParseState(out []byte) State {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var s State
	if len(lines) > 0 {
		s.BootID = strings.TrimSpace(lines[0])
	}
	if len(lines) > 1 {
		f := strings.Fields(lines[1])
		if len(f) == 2 && f[0] == "0" {
			mode, err := strconv.ParseUint(f[1], 8, 32)
			s.StampOK = err == nil && mode&0o022 == 0
		}
	}
	if len(lines) > 2 {
		f := strings.Fields(lines[2])
		if len(f) == 2 {
			s.StampHash, s.StampBoot = f[0], f[1]
		}
	}
	return s
}

// Read reads the stamp in one guest call.
func Read(ctx context.Context, r guest.Runner, p Params) (State, error) {
	res, err := guest.RunOK(ctx, r, ReadCmd(p))
	if err != nil {
		return State{}, fmt.Errorf("reading provisioning stamp: %w", err)
	}
	return ParseState(res.Stdout), nil
}

// Result is what a provisioning run did.
type Result struct {
	Skipped  bool     // the stamp matched: nothing ran
	Changes  []string // one line per change made
	UID      int
	Runtime  string
	Duration string
}

// Ensure provisions the guest unless the stamp says this exact script already ran in this
// boot. When state is nil it reads the stamp first (one extra guest call). A full run is
// one more guest call.
func Ensure(ctx context.Context, r guest.Runner, p Params, state *State) (Result, error) {
	p = p.withDefaults()
	if state == nil {
		st, err := Read(ctx, r, p)
		if err != nil {
			return Result{}, err
		}
		state = &st
	}
	if state.Current(p) {
		return Result{Skipped: true}, nil
	}
	return Run(ctx, r, p, false)
}

// Run runs the script (one guest call). skipInstall leaves packages alone.
func Run(ctx context.Context, r guest.Runner, p Params, skipInstall bool) (Result, error) {
	p = p.withDefaults()
	if err := validName(p.RunUser); err != nil {
		return Result{}, err
	}
	skip := "0"
	if skipInstall {
		skip = "1"
	}
	env := []string{
		"LEVER_RUN_USER=" + p.RunUser,
		"LEVER_PACKAGES=" + strings.Join(p.Packages, " "),
		"LEVER_STAMP=" + p.Stamp,
		"LEVER_HASH=" + p.Hash(),
		"LEVER_SYSCTL_FILE=" + p.SysctlFile,
		"LEVER_SKIP_INSTALL=" + skip,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	sc := guest.NewScript(script)
	res, err := guest.RunOK(ctx, r, sc.Cmd(env))
	if err != nil {
		return Result{}, fmt.Errorf("provisioning the guest: %w", err)
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil {
		return Result{}, fmt.Errorf("provisioning the guest: %w", err)
	}
	var out Result
	for i := 1; secs.Has(fmt.Sprintf("change.%d", i)); i++ {
		out.Changes = append(out.Changes, strings.TrimSpace(secs[fmt.Sprintf("change.%d", i)].Out))
	}
	if out.UID, err = strconv.Atoi(strings.TrimSpace(secs["uid"].Out)); err != nil {
		return Result{}, fmt.Errorf("provisioning the guest: no run user uid in its answer (%q)", secs["uid"].Out)
	}
	out.Runtime = strings.TrimSpace(secs["runtime"].Out)
	return out, nil
}

// validName refuses a run user name that is not a plain POSIX user name: it reaches a
// root shell in the guest.
func validName(n string) error {
	if n == "" || len(n) > 32 {
		return fmt.Errorf("run user %q: must be 1-32 characters", n)
	}
	for i, c := range n {
		ok := c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '-')
		if !ok {
			return fmt.Errorf("run user %q: only a-z, 0-9, _ and - (not first) are allowed", n)
		}
	}
	return nil
}
