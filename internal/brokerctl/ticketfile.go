package brokerctl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/cap/ticket"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/fspath"
)

// IssueTicket issues a single-use enrolment ticket for agent from the instance's ticket
// store. Tickets are files in the state dir, so this works with or without a running
// broker.
func IssueTicket(stateDir, agent, role string, ttl time.Duration) (string, error) {
	st, err := ticket.Open(TicketDir(stateDir))
	if err != nil {
		return "", err
	}
	return st.Issue(agent, role, ttl)
}

// CheckTicketOut refuses a ticket file path inside the config's directory or the project
// tree: anything there is in the jail (the tree is mounted) or next to what is checked in
// beside lever.yaml, and a ticket is a credential. The path is judged both as written and
// with the symlinks of its existing part resolved, so a link outside the tree that points
// into it is refused too.
func CheckTicketOut(cfg *config.Config, out string) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("--out %s: %w", out, err)
	}
	tree := cfg.Tree
	if !filepath.IsAbs(tree) {
		tree = filepath.Join(cfg.Dir, tree)
	}
	real := resolveExisting(abs)
	for _, d := range []string{cfg.Dir, tree} {
		for _, dir := range []string{d, resolveExisting(d)} {
			if fspath.Within(dir, abs) || fspath.Within(dir, real) {
				return fmt.Errorf("--out %s is inside %s; a ticket must never be written into the project tree or next to the config", out, d)
			}
		}
	}
	return nil
}

// WriteTicketFile writes tok to out, a new file of mode 0600, after CheckTicketOut.
func WriteTicketFile(cfg *config.Config, out, tok string) error {
	if err := CheckTicketOut(cfg, out); err != nil {
		return err
	}
	return ca.WritePrivateFileExcl(out, []byte(tok+"\n"))
}

// resolveExisting resolves the symlinks of the longest existing prefix of the absolute path
// p and appends the rest unchanged (a file about to be created does not exist yet, but its
// directory does).
func resolveExisting(p string) string {
	rest := ""
	for cur := filepath.Clean(p); ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		} else if !errors.Is(err, os.ErrNotExist) {
			return p
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
