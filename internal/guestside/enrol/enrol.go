// Package enrol is the guest side of bring-up's enrol step: started as root in the guest,
// in the jail's network namespace, as `lev __guest enrol`, it makes the agents' lev homes,
// sheds root, redeems each agent's one-use ticket at the broker (the key is generated
// here and never leaves the guest) and pushes the user's lev settings. It links only the
// broker's client side, so lev can carry it; it must not import the broker's server, the
// CA's private side or the podman bindings.
package enrol

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/brokerclient"
	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/guestside/runas"
	"github.com/lever-jail/lever/internal/levsettings"
)

// Request is what the guest-side enrolment gets on stdin: for each agent, a one-use
// ticket. The agent's private key is generated in the guest and never leaves it; the
// ticket crosses once and is spent on redemption.
//
// The same call makes each agent's lev home and bench dir and pushes the user's lev
// settings (when they are stale): one guest call for all of it, made only when something
// is missing or stale.
type Request struct {
	BrokerURL string  `json:"broker_url"` // https://<alias IP>:<jail port>
	CAPEM     string  `json:"ca_pem"`
	UID       int     `json:"uid"`
	Agents    []Agent `json:"agents"`
	// LevHomeRoot is the root-owned directory holding the agents' lev homes (outside the
	// run user's reach to rename or replace, so root can create the homes in it safely).
	LevHomeRoot string `json:"lev_home_root"`
	// LevHomeBase is the ancestor of LevHomeRoot from which lever owns the path (the
	// instance's state dir on the netns substrate, /var/lib/lever on a VM): only there may
	// the helper make dirs or open them for traversal; above it it only checks.
	LevHomeBase string `json:"lev_home_base"`
	// Settings is the bundle pushed to every agent with Push set; SettingsHash its Hash.
	Settings     *levsettings.Bundle `json:"settings,omitempty"`
	SettingsHash string              `json:"settings_hash,omitempty"`
}

// Agent is one agent to enrol, or to give its dirs and settings.
type Agent struct {
	Name   string `json:"name"`   // certificate identity
	Ticket string `json:"ticket"` // one-use; empty: the certificate is still valid
	Dir    string `json:"dir"`    // the agent's dir on the run user's tmpfs
	// Home is <LevHomeRoot>/<agent>; Bench is the agent's bench dir on the tmpfs.
	Home  string `json:"home"`
	Bench string `json:"bench"`
	Push  bool   `json:"push"` // write Settings into Dir
}

// MaxRequest caps the helper's stdin: the settings bundle (base64 in JSON) plus one
// certificate request per agent.
const MaxRequest = levsettings.MaxBytes*2 + 1<<20

// Files in an agent's enrolment dir (seen by lev at /run/lever).
const (
	FileCA    = "ca.crt"
	FileCert  = "client.crt"
	FileKey   = "client.key"
	FileToken = "token" // lev's own daemon bearer token
)

// Serve runs in the guest, in the jail's network namespace; started as root, it
// becomes the run user first. It enrols each agent with the broker (dialled by IP through
// the egress firewall) and leaves its files, owned by the run user and readable by it
// only, in the agent's dir.
func Serve(r io.Reader, w io.Writer) error {
	var req Request
	if err := json.NewDecoder(io.LimitReader(r, MaxRequest)).Decode(&req); err != nil {
		return fmt.Errorf("reading the enrolment request: %w", err)
	}
	if err := checkAgentPaths(req); err != nil {
		return err
	}
	// lev homes persist outside the tmpfs, under a root-owned directory: made while root,
	// each home handed to the run user, before root is shed.
	if err := makeLevHomes(req); err != nil {
		return err
	}
	// The agents' dirs live on the run user's tmpfs, where the run user (and so anything
	// that escapes a rootless container) can plant symlinks. Root following one would
	// write or chown any file in the guest, so the helper sheds root before it touches
	// the filesystem or the network: all it needs is the jail's network namespace, which
	// it is already in.
	if err := runas.Become(req.UID); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range req.Agents {
		for _, d := range []string{a.Dir, a.Bench} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return fmt.Errorf("making %s: %w", d, err)
			}
			if err := ownDir(d, req.UID); err != nil {
				return err
			}
		}
		if err := ownDir(a.Home, req.UID); err != nil {
			return err
		}
		if a.Ticket != "" {
			cert, key, err := brokerclient.Enrol(ctx, req.BrokerURL, []byte(req.CAPEM), a.Name, a.Ticket)
			if err != nil {
				return err
			}
			files := map[string][]byte{FileCA: []byte(req.CAPEM), FileCert: cert, FileKey: key}
			// A certificate renewal keeps lev's bearer token: the running daemon read it
			// at start and is not restarted by a renewal, so a new one would lock every
			// `lev` client in the container out of it.
			if old, err := os.ReadFile(filepath.Join(a.Dir, FileToken)); err != nil || len(bytes.TrimSpace(old)) < 32 {
				tok := make([]byte, 24)
				if _, err := rand.Read(tok); err != nil {
					return err
				}
				files[FileToken] = []byte(hex.EncodeToString(tok) + "\n")
			}
			for name, data := range files {
				if err := writeFileAtomic(filepath.Join(a.Dir, name), data); err != nil {
					return err
				}
			}
			fmt.Fprintf(w, "enrolled %s\n", a.Name)
		}
		if a.Push {
			if req.Settings == nil || req.Settings.Hash() != req.SettingsHash {
				return fmt.Errorf("settings for %s: the request carries none, or not those its hash names", a.Name)
			}
			if err := writeSettings(a.Dir, req.Settings, req.SettingsHash); err != nil {
				return err
			}
			fmt.Fprintf(w, "settings %s %s\n", a.Name, req.SettingsHash[:12])
		}
	}
	return nil
}

// checkAgentPaths refuses dirs that are not <root>/<agent> for the roots lever uses: the
// request comes from the host, but a wrong path here would be created or chowned by root.
func checkAgentPaths(req Request) error {
	agents := fmt.Sprintf("/run/user/%d/lever/agents/", req.UID)
	bench := fmt.Sprintf("/run/user/%d/lever/bench/", req.UID)
	if !filepath.IsAbs(req.LevHomeRoot) || filepath.Clean(req.LevHomeRoot) != req.LevHomeRoot || req.LevHomeRoot == "/" {
		return fmt.Errorf("lev home root %q: not an absolute clean path", req.LevHomeRoot)
	}
	if req.LevHomeBase == "/" || filepath.Clean(req.LevHomeBase) != req.LevHomeBase || req.LevHomeRoot == req.LevHomeBase || !fspath.Within(req.LevHomeBase, req.LevHomeRoot) {
		return fmt.Errorf("lev home base %q: not an ancestor of the lev home root %s", req.LevHomeBase, req.LevHomeRoot)
	}
	for _, a := range req.Agents {
		name := filepath.Base(a.Dir)
		if name == "." || name == ".." || name == "/" || a.Dir != agents+name || a.Bench != bench+name || a.Home != filepath.Join(req.LevHomeRoot, name) {
			return fmt.Errorf("agent %s: dirs %q %q %q are not the agent's own under the lever roots", a.Name, a.Dir, a.Bench, a.Home)
		}
	}
	return nil
}

// makeLevHomes makes <LevHomeRoot> (root-owned, mode 0711: the run user's rootless podman
// must pass through it to bind-mount a home, and may not list or change it) and each
// agent's home in it, owned by the run user, mode 0700. Every component must be a real
// directory owned by root that nobody else can write (or a sticky one, like /tmp):
// otherwise the run user could swap a component for a link and have root create or chown
// somewhere else. From LevHomeBase down, missing dirs are made and closed ones opened for
// traversal (o+x, never read); above it nothing is changed: a private dir there (a root
// home holding the netns substrate's state dir) is an error naming it. A helper that is
// already the run user (tests) only makes the homes.
func makeLevHomes(req Request) error {
	if os.Geteuid() != 0 {
		for _, a := range req.Agents {
			if err := os.MkdirAll(a.Home, 0o700); err != nil {
				return fmt.Errorf("making lev home %s: %w", a.Home, err)
			}
		}
		return nil
	}
	u, err := user.LookupId(strconv.Itoa(req.UID))
	if err != nil {
		return fmt.Errorf("looking up the run user %d: %w", req.UID, err)
	}
	gid, _ := strconv.Atoi(u.Gid)
	cur := "/"
	for _, part := range strings.Split(strings.TrimPrefix(req.LevHomeRoot, "/"), "/") {
		cur = filepath.Join(cur, part)
		ours := fspath.Within(req.LevHomeBase, cur)
		st, err := os.Lstat(cur)
		if os.IsNotExist(err) && ours {
			// the image helper, running beside this one, may make it first: judge
			// whatever is there then, as any existing directory is
			if err := os.Mkdir(cur, 0o711); err != nil && !os.IsExist(err) {
				return fmt.Errorf("making %s: %w", cur, err)
			}
			st, err = os.Lstat(cur)
		}
		if err != nil {
			return fmt.Errorf("lev home root: %w", err)
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		if !st.IsDir() || sys == nil || sys.Uid != 0 || (st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0) {
			return fmt.Errorf("lev home root: %s is not a directory only root can change (mode %s); refusing to make lev homes through it", cur, st.Mode())
		}
		if st.Mode().Perm()&0o001 == 0 {
			if !ours {
				return fmt.Errorf("lev home root: %s (mode %s) does not let the run user's podman pass through to the lev homes; lever changes no mode above %s: on the netns substrate set LEVER_STATE_DIR to a directory others may traverse", cur, st.Mode().Perm(), req.LevHomeBase)
			}
			if err := os.Chmod(cur, st.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("making %s traversable: %w", cur, err)
			}
		}
	}
	for _, a := range req.Agents {
		if err := os.Mkdir(a.Home, 0o700); err != nil && !os.IsExist(err) {
			return fmt.Errorf("making lev home %s: %w", a.Home, err)
		}
		st, err := os.Lstat(a.Home)
		if err != nil || !st.IsDir() {
			return fmt.Errorf("lev home %s is not a directory", a.Home)
		}
		if err := os.Lchown(a.Home, req.UID, gid); err != nil {
			return fmt.Errorf("handing lev home %s to the run user: %w", a.Home, err)
		}
		if err := os.Chmod(a.Home, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// ownDir checks a dir the helper (now the run user) uses: a real directory it owns, mode
// 0700 (an older one with a looser mode is tightened).
func ownDir(d string, uid int) error {
	st, err := os.Lstat(d)
	if err != nil {
		return fmt.Errorf("agent dir: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || sys == nil || int(sys.Uid) != uid {
		return fmt.Errorf("agent dir %s is not a directory owned by the run user", d)
	}
	if st.Mode().Perm() != 0o700 {
		return os.Chmod(d, 0o700)
	}
	return nil
}

// writeSettings puts the bundle into an agent's dir: config.toml (always; empty when
// lev.config is unset), agents/ (swapped in whole, so lev never sees a half-written set
// and a blueprint deleted on the host is gone), policy.toml (removed when lev.policy is
// unset), and last the hash file that says the push is complete.
func writeSettings(dir string, b *levsettings.Bundle, hash string) error {
	if err := writeFileAtomic(filepath.Join(dir, levsettings.FileConfig), b.Config); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, ".agents-")
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	defer os.RemoveAll(tmp)
	for rel, data := range b.Agents {
		if err := levsettings.CheckRelative(rel); err != nil {
			return err
		}
		p := filepath.Join(tmp, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return err
	}
	dst := filepath.Join(dir, levsettings.DirAgents)
	old := tmp + ".old"
	if err := os.Rename(dst, old); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("settings: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	os.RemoveAll(old)
	pol := filepath.Join(dir, levsettings.FilePolicy)
	if b.HasPolicy {
		if err := writeFileAtomic(pol, b.Policy); err != nil {
			return err
		}
	} else if err := os.Remove(pol); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("settings: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, levsettings.FileHash), []byte(hash+"\n"))
}

// writeFileAtomic writes through a fresh temp file (O_EXCL: never an existing file or a
// planted symlink) and renames it into place.
func writeFileAtomic(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, p)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", p, werr)
	}
	return nil
}
