// Package forwardrec is the record a VM backend keeps of the socket forwards it asked its
// ssh master for: one "host guest" line each, in the instance's state dir, so that stop
// and destroy (often a later lever process) can cancel them and remove the host sockets.
// It owns only that file; it never runs ssh.
package forwardrec

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File is the record at this path.
type File string

// Add records a forward once: recording one already there changes nothing, so an
// idempotent ForwardSocket can call it on every bring-up.
func (f File) Add(hostPath, guestPath string) error {
	line := hostPath + " " + guestPath
	for _, r := range f.List() {
		if r[0]+" "+r[1] == line {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(string(f)), 0o700); err != nil {
		return fmt.Errorf("recording the socket forward: %w", err)
	}
	w, err := os.OpenFile(string(f), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("recording the socket forward: %w", err)
	}
	defer w.Close()
	_, err = fmt.Fprintln(w, line)
	return err
}

// List returns the recorded forwards as {host, guest} pairs; no record is none.
func (f File) List() [][2]string {
	r, err := os.Open(string(f))
	if err != nil {
		return nil
	}
	defer r.Close()
	var out [][2]string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if h, g, ok := strings.Cut(sc.Text(), " "); ok {
			out = append(out, [2]string{h, g})
		}
	}
	return out
}
