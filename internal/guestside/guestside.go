// Package guestside is how lever runs its helpers inside the guest: they are modes of the
// lev binary (`lev __guest probe|enrol`), which lever builds and ships for Linux on each
// architecture, so the helper always matches the guest, whatever the host runs; the host's
// own lever executable never enters the guest (from a Mac it could not run there).
//
// Serve is the guest end (lev's hidden __guest command); Helper (helper.go) is the host
// end, with Argv for lev run in place. Because lev links it, it must not import the
// podman bindings, a backend or anything host-only.
package guestside

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lever-jail/lever/internal/guestside/enrol"
	"github.com/lever-jail/lever/internal/guestside/imagebuild"
	"github.com/lever-jail/lever/internal/guestside/mountcheck"
	"github.com/lever-jail/lever/internal/guestside/probes"
)

// Command is lev's hidden subcommand that serves a helper mode.
const Command = "__guest"

// The helper modes.
const (
	ModeProbe = "probe" // acceptance: network probes, process inspection, key search
	ModeEnrol = "enrol" // bring-up: lev homes, enrolment, lev settings
	// ModeImages builds lever's images in the guest and loads them there.
	ModeImages = "images"
	// ModeMounts proves a container's in-tree mounts after podman init, before it starts.
	ModeMounts = "mounts"
	// ModeMountsLive proves the in-tree mounts of running containers (every bring-up's
	// observation carries it: a rename-save on the host detaches a read-only mount).
	ModeMountsLive = "mounts-live"
)

// modes are the helper modes Serve knows, for the refusal of any other.
var modes = []string{ModeProbe, ModeEnrol, ModeImages, ModeMounts, ModeMountsLive}

// knownMode says whether mode is one of the helper modes.
func knownMode(mode string) bool {
	for _, m := range modes {
		if m == mode {
			return true
		}
	}
	return false
}

// Serve runs one helper mode with its request on r and its answer on w.
func Serve(mode string, r io.Reader, w io.Writer) error {
	switch mode {
	case ModeProbe:
		return probes.Serve(r, w)
	case ModeEnrol:
		return enrol.Serve(r, w)
	case ModeImages:
		return imagebuild.Serve(r, w)
	case ModeMounts:
		return mountcheck.Serve(r, w)
	case ModeMountsLive:
		return mountcheck.ServeLive(r, w)
	}
	return fmt.Errorf("unknown guest helper mode %q (want one of %s)", mode, strings.Join(modes, ", "))
}

// InPlaceArgv is how the host starts helper mode where the guest shares the host's
// filesystem (the netns substrate): lev, the Linux lev binary for the guest's
// architecture, runs from its host path as root. In a VM guest Helper runs lever's
// installed copy instead.
func InPlaceArgv(lev string, mode string) ([]string, error) {
	if !knownMode(mode) {
		return nil, fmt.Errorf("unknown guest helper mode %q", mode)
	}
	// In place the helper runs as root from a host path: a path anyone but root (or
	// lever's own user) could replace would run their code as root, e.g. a lev in the
	// jail's tree.
	real, err := checkOwnPath(lev)
	if err != nil {
		return nil, err
	}
	// the checked file itself, not the name given: a symlink to it could sit in a
	// directory someone else can write, and be swapped after the check
	return []string{real, Command, mode}, nil
}

// checkOwnPath refuses a file that someone other than root or this process's user could
// change or swap: the file and every directory above it must be owned by one of them and
// writable by no one else (a sticky directory such as /tmp may be, since others cannot
// replace what they do not own in it). It returns the path it checked, symlinks resolved.
func checkOwnPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("guest helper %s: %w", p, err)
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", fmt.Errorf("guest helper %s: %w", p, err)
	}
	me := uint32(os.Geteuid())
	for cur, file := abs, true; ; cur, file = filepath.Dir(cur), false {
		st, err := os.Stat(cur)
		if err != nil {
			return "", fmt.Errorf("guest helper %s: %w", p, err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return "", fmt.Errorf("guest helper %s: cannot read the owner of %s", p, cur)
		}
		writable := st.Mode().Perm()&0o022 != 0 && (file || st.Mode()&os.ModeSticky == 0)
		if (sys.Uid != 0 && sys.Uid != me) || writable {
			return "", fmt.Errorf("guest helper %s runs as root in place, but %s (owner uid %d, mode %s) can be changed by someone else; put lev where only root can write", p, cur, sys.Uid, st.Mode())
		}
		if cur == "/" {
			return abs, nil
		}
	}
}
