package bringup

import (
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
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl"
)

// EnrolRequest is what the guest-side enrolment gets on stdin: for each agent, a one-use
// ticket. The agent's private key is generated in the guest and never leaves it; the
// ticket crosses once and is spent on redemption.
type EnrolRequest struct {
	BrokerURL string       `json:"broker_url"` // https://<alias IP>:<jail port>
	CAPEM     string       `json:"ca_pem"`
	UID       int          `json:"uid"`
	Agents    []EnrolAgent `json:"agents"`
}

// EnrolAgent is one agent to enrol.
type EnrolAgent struct {
	Name   string `json:"name"`   // certificate identity
	Ticket string `json:"ticket"` // one-use
	Dir    string `json:"dir"`    // the agent's dir on the run user's tmpfs
}

// Files in an agent's enrolment dir (seen by lev at /run/lever).
const (
	FileCA    = "ca.crt"
	FileCert  = "client.crt"
	FileKey   = "client.key"
	FileToken = "token" // lev's own daemon bearer token
)

// ServeEnrol runs in the guest, in the jail's network namespace; started as root, it
// becomes the run user first. It enrols each agent with the broker (dialled by IP through
// the egress firewall) and leaves its files, owned by the run user and readable by it
// only, in the agent's dir.
func ServeEnrol(r io.Reader, w io.Writer) error {
	var req EnrolRequest
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return fmt.Errorf("reading the enrolment request: %w", err)
	}
	// The agents' dirs live on the run user's tmpfs, where the run user (and so anything
	// that escapes a rootless container) can plant symlinks. Root following one would
	// write or chown any file in the guest, so the helper sheds root before it touches
	// the filesystem or the network: all it needs is the jail's network namespace, which
	// it is already in.
	if err := becomeUser(req.UID); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range req.Agents {
		cert, key, err := brokerctl.Enrol(ctx, req.BrokerURL, []byte(req.CAPEM), a.Name, a.Ticket)
		if err != nil {
			return err
		}
		tok := make([]byte, 24)
		if _, err := rand.Read(tok); err != nil {
			return err
		}
		if err := os.MkdirAll(a.Dir, 0o700); err != nil {
			return fmt.Errorf("making %s: %w", a.Dir, err)
		}
		for name, data := range map[string][]byte{FileCA: []byte(req.CAPEM), FileCert: cert, FileKey: key, FileToken: []byte(hex.EncodeToString(tok) + "\n")} {
			if err := writeFileAtomic(filepath.Join(a.Dir, name), data); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "enrolled %s\n", a.Name)
	}
	return nil
}

// becomeUser drops root for good: supplementary groups, then gid, then uid (Go applies
// each to every thread). Already running as uid is fine; running as anyone else is not.
func becomeUser(uid int) error {
	if os.Geteuid() == uid {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("enrolment helper runs as uid %d, neither root nor the run user %d", os.Geteuid(), uid)
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return fmt.Errorf("looking up the run user %d: %w", uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("run user %d has a bad gid %q", uid, u.Gid)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping supplementary groups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("switching to gid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("switching to uid %d: %w", uid, err)
	}
	return nil
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
