// Package guestside is how lever runs its helpers inside the guest: they are modes of the
// lev binary (`lev __guest probe|enrol`), which lever builds and ships for Linux on each
// architecture, so the helper always matches the guest, whatever the host runs; the host's
// own lever executable never enters the guest (from a Mac it could not run there).
//
// Serve is the guest end (lev's hidden __guest command); Argv is the host end.
package guestside

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/lever-jail/lever/internal/guestside/enrol"
	"github.com/lever-jail/lever/internal/guestside/probes"
)

// Command is lev's hidden subcommand that serves a helper mode.
const Command = "__guest"

// The helper modes.
const (
	ModeProbe = "probe" // acceptance: network probes, process inspection, key search
	ModeEnrol = "enrol" // bring-up: lev homes, enrolment, lev settings
)

// Serve runs one helper mode with its request on r and its answer on w.
func Serve(mode string, r io.Reader, w io.Writer) error {
	switch mode {
	case ModeProbe:
		return probes.Serve(r, w)
	case ModeEnrol:
		return enrol.Serve(r, w)
	}
	return fmt.Errorf("unknown guest helper mode %q (want %s or %s)", mode, ModeProbe, ModeEnrol)
}

// Argv is how the host starts helper mode in the guest with lev, the Linux lev binary
// for the guest's architecture (the caller chose and checked it). When the guest shares
// the host's filesystem (the netns substrate) lev runs in place; otherwise its bytes
// travel on stdin ahead of the request (stdinPrefix) and run from a private temporary
// file, so nothing has to be installed in the guest and what runs is exactly the binary
// lever checked.
func Argv(lev string, inPlace bool, mode string) (argv []string, stdinPrefix []byte, err error) {
	if mode != ModeProbe && mode != ModeEnrol {
		return nil, nil, fmt.Errorf("unknown guest helper mode %q", mode)
	}
	if inPlace {
		return []string{lev, Command, mode}, nil, nil
	}
	bin, err := os.ReadFile(lev)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the guest helper (lev) %s: %w", lev, err)
	}
	// head -c reads exactly the binary's bytes, leaving the request on stdin for lev.
	script := `set -e; d=$(mktemp -d); trap 'rm -rf "$d"' EXIT; head -c ` + strconv.Itoa(len(bin)) +
		` >"$d/lev"; chmod 0700 "$d/lev"; "$d/lev" ` + Command + ` ` + mode
	return []string{"/bin/sh", "-c", script}, bin, nil
}
