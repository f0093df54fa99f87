package bringup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// ServeEnrol runs in the guest as root, in the jail's network namespace: it enrols each
// agent with the broker (dialled by IP through the egress firewall) and leaves its files,
// owned by the run user and readable by it only, in the agent's dir.
func ServeEnrol(r io.Reader, w io.Writer) error {
	var req EnrolRequest
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return fmt.Errorf("reading the enrolment request: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range req.Agents {
		cert, key, err := brokerctl.Enrol(ctx, req.BrokerURL, []byte(req.CAPEM), a.Name, a.Ticket)
		if err != nil {
			return err
		}
		tok := make([]byte, 24)
		rand.Read(tok)
		if err := os.MkdirAll(a.Dir, 0o700); err != nil {
			return err
		}
		// The dir and its parents up to the run user's runtime dir belong to the run user.
		for d := a.Dir; len(d) > len("/run/user/") && filepath.Base(filepath.Dir(d)) != "user"; d = filepath.Dir(d) {
			os.Chown(d, req.UID, req.UID)
			os.Chmod(d, 0o700)
		}
		for name, data := range map[string][]byte{FileCA: []byte(req.CAPEM), FileCert: cert, FileKey: key, FileToken: []byte(hex.EncodeToString(tok) + "\n")} {
			p := filepath.Join(a.Dir, name)
			tmp := p + ".tmp"
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				return err
			}
			if err := os.Chown(tmp, req.UID, req.UID); err != nil {
				return err
			}
			if err := os.Rename(tmp, p); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "enrolled %s\n", a.Name)
	}
	return nil
}
