package brokerctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// beside lever.yaml, and a ticket is a credential. The path is judged as written and where
// the kernel would create it: its directory resolved component by component, a symlink
// before the ".." that follows it, as open(2) walks it. (filepath.Abs alone cleans
// "link/../x" to "x" lexically, and a link outside the tree pointing in would pass.) It
// returns the resolved path, which is the one to write.
func CheckTicketOut(cfg *config.Config, out string) (string, error) {
	abs, err := filepath.Abs(out)
	if err != nil {
		return "", fmt.Errorf("--out %s: %w", out, err)
	}
	target, err := createdAt(out)
	if err != nil {
		return "", err
	}
	tree := cfg.Tree
	if !filepath.IsAbs(tree) {
		tree = filepath.Join(cfg.Dir, tree)
	}
	for _, d := range []string{cfg.Dir, tree} {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			real = d
		}
		for _, dir := range []string{d, real} {
			if fspath.Within(dir, abs) || fspath.Within(dir, target) {
				return "", fmt.Errorf("--out %s is inside %s; a ticket must never be written into the project tree or next to the config", out, d)
			}
		}
	}
	return target, nil
}

// WriteTicketFile writes tok to a new file of mode 0600 at the path CheckTicketOut
// resolves out to, so the file written is the one that was judged.
func WriteTicketFile(cfg *config.Config, out, tok string) error {
	target, err := CheckTicketOut(cfg, out)
	if err != nil {
		return err
	}
	return ca.WritePrivateFileExcl(target, []byte(tok+"\n"))
}

// createdAt is where creating the file out would put it: its directory with every symlink
// and ".." resolved in walk order (filepath.EvalSymlinks on the unclean string), joined
// with its name. The directory must exist: a file cannot be created in one that does not.
func createdAt(out string) (string, error) {
	raw := out
	if !filepath.IsAbs(raw) {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("--out %s: %w", out, err)
		}
		raw = wd + string(filepath.Separator) + raw
	}
	i := strings.LastIndexByte(raw, filepath.Separator)
	dir, name := raw[:i], raw[i+1:]
	if dir == "" {
		dir = string(filepath.Separator)
	}
	if name == "" || name == "." || name == ".." {
		return "", fmt.Errorf("--out %s names a directory, not a new file", out)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("--out %s: its directory: %w", out, err)
	}
	return filepath.Join(real, name), nil
}
