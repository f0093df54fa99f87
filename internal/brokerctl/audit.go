package brokerctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Record is one line of the audit log. It names who did what and how it went; it never
// holds a request or response body, a header value, a ticket or the API key.
type Record struct {
	Time       time.Time `json:"time"`
	Who        string    `json:"who"`              // client certificate CN, "-" when none
	Serial     string    `json:"serial,omitempty"` // client certificate serial
	Listener   string    `json:"listener"`         // jail or admin
	Method     string    `json:"method,omitempty"`
	Route      string    `json:"route"`
	Status     int       `json:"status,omitempty"`
	Outcome    string    `json:"outcome"` // ok, refused, error, aborted, or an event name
	BytesIn    int64     `json:"bytes_in"`
	BytesOut   int64     `json:"bytes_out"`
	DurationMS float64   `json:"duration_ms"`
	Remote     string    `json:"remote,omitempty"`
	Detail     string    `json:"detail,omitempty"`
}

// Audit appends records as JSON lines to a 0600 file. Each line is one write on an
// O_APPEND descriptor, so lines never interleave.
type Audit struct {
	mu     sync.Mutex
	f      *os.File
	secret []byte // scrubbed from every line as a last line of defence
}

func openAudit(path string) (*Audit, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &Audit{f: f}, nil
}

// Log writes r. A failure to audit is reported to the caller's log, not to the client.
func (a *Audit) Log(r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	r.Time = r.Time.UTC()
	if r.Who == "" {
		r.Who = "-"
	}
	if len(r.Route) > 256 {
		r.Route = r.Route[:256]
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(a.secret) > 0 {
		line = bytes.ReplaceAll(line, a.secret, []byte(strings.Repeat("*", len(a.secret))))
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err = a.f.Write(line)
	return err
}

// Close closes the file.
func (a *Audit) Close() error { return a.f.Close() }
