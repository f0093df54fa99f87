package brokerctl

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
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

	// DroppedHeaders names (never values) the client request headers /llm/ did not
	// forward (reqheaders.go).
	DroppedHeaders string `json:"dropped_headers,omitempty"`

	// skip, set by the rate limiter, drops the line: a flood of refusals is summarised
	// by the next line it lets through instead.
	skip bool
	// peer is the verified client certificate's CN, set when the request starts (Who
	// may be rewritten by the handler): the identity the audit thinner keys on.
	peer string
	// body, on the jail listener, tells whether the request body timed out.
	body *deadlineBody
}

// Field caps. Every field a client can influence (the name it claims, the method and
// path it sends, a message quoting its input) is cut to these, so one request costs at
// most about 2 KiB of audit log however large it is.
const (
	capShort  = 64
	capWho    = 128
	capRoute  = 256
	capDetail = 1024
)

// capText cuts s to at most n bytes (at a UTF-8 boundary) and says how much was cut.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[" + strconv.Itoa(len(s)-cut) + " more bytes]"
}

// logSafe spells out, as \u{XXXX}, every character of s that a terminal or viewer acts on
// rather than shows: C0 and C1 controls (U+009B is CSI to some terminals), DEL, format
// characters (bidi overrides and isolates, zero-width ones) and the line and paragraph
// separators; invalid UTF-8 becomes \u{FFFD}. A path or message an unauthenticated
// client chose (the route is the decoded request path) then cannot reorder or restyle
// what the operator reads with cat, less or jq -r. JSON would escape only the C0 ones.
func logSafe(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeRune(r) {
			fmt.Fprintf(&b, "\\u{%04X}", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r < 0x20 || r >= 0x7f && r < 0xa0 || r == utf8.RuneError || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Cf, r)
}

// Audit defaults: rotate at 16 MiB, keep 4 old files, so the log never takes more than
// 80 MiB of disk.
const (
	DefaultAuditMaxBytes = 16 << 20
	DefaultAuditKeep     = 4
)

// Audit appends records as JSON lines to a 0600 file. Each line is one write on an
// O_APPEND descriptor, so lines never interleave. When a line would take the file past
// maxBytes the file is rotated first (audit.jsonl -> .1 -> .2 ... -> .keep, the oldest
// dropped) and the line goes into the fresh file; a rotation that fails leaves the
// current file in place and the line is still written there.
type Audit struct {
	mu       sync.Mutex
	path     string
	f        *os.File
	size     int64
	maxBytes int64
	keep     int
	mask     *keymask.Masker // scrubs the key, in every form, from every line (last line of defence)
	logf     func(string, ...any)
}

func openAudit(path string, maxBytes int64, keep int) (*Audit, error) {
	a := &Audit{path: path, maxBytes: maxBytes, keep: keep, mask: keymask.New(nil), logf: func(string, ...any) {}}
	if err := a.open(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Audit) open() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	a.f, a.size = f, st.Size()
	return nil
}

// rotatedPath is the n-th old file: audit.jsonl.1 is the newest.
func (a *Audit) rotatedPath(n int) string { return a.path + "." + strconv.Itoa(n) }

// rotate shifts the old files up by one and starts a new file. Called with mu held.
func (a *Audit) rotate() error {
	if a.keep <= 0 {
		return a.f.Truncate(0)
	}
	os.Remove(a.rotatedPath(a.keep))
	for n := a.keep - 1; n >= 1; n-- {
		if err := os.Rename(a.rotatedPath(n), a.rotatedPath(n+1)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Rename(a.path, a.rotatedPath(1)); err != nil {
		return err
	}
	old := a.f
	if err := a.open(); err != nil {
		// The old descriptor still points at the renamed file: keep writing there.
		return err
	}
	old.Close()
	return nil
}

// Log writes r. A failure to audit is reported to the caller's log, not to the client.
func (a *Audit) Log(r Record) error {
	if r.skip {
		return nil
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	r.Time = r.Time.UTC()
	if r.Who == "" {
		r.Who = "-"
	}
	r.Who = capText(logSafe(r.Who), capWho)
	r.Serial = capText(logSafe(r.Serial), capShort)
	r.Listener = capText(logSafe(r.Listener), capShort)
	r.Method = capText(logSafe(r.Method), capShort)
	r.Route = capText(logSafe(r.Route), capRoute)
	r.Outcome = capText(logSafe(r.Outcome), capShort)
	r.Remote = capText(logSafe(r.Remote), capShort)
	r.Detail = capText(logSafe(r.Detail), capDetail)
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	a.mask.MaskInPlace(line)
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.maxBytes > 0 && a.size > 0 && a.size+int64(len(line)) > a.maxBytes {
		if err := a.rotate(); err != nil {
			a.logf("broker: audit log rotation: %v (still writing to %s)", err, a.path)
		} else {
			a.size = 0
		}
	}
	n, err := a.f.Write(line)
	a.size += int64(n)
	return err
}

// Close closes the file.
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f.Close()
}
