// Package bench is the workbench exec channel: lev (in its own container, holding its
// token, TLS key and state) asks the workbench container, over a unix socket the two
// share, to run one command, and gets its exit code and capped output back. Nothing an
// agent's tools start runs beside lev, and the workbench holds nothing of lev's.
//
// The protocol is one request per connection: the client writes one JSON object on one
// line, the server runs the command and writes one JSON object on one line back, then
// closes. A request with "stream": true (a stdio MCP server) is answered at start instead:
// one JSON line saying it started, then the command's stdout, raw, until it exits; what
// the client writes after its request line is the command's stdin (the client's half-close
// is its EOF); stderr is kept up to stderr_max and dropped. The client keeps its side open while the command runs: the server reads it the
// whole time, and a client that goes away (or writes anything more) gets its command's
// process group killed.
//
// Every answer is proven (auth.go): an HMAC, under a key the server makes at each start
// beside the socket, of the request line (with the client's nonce) and of the answer; the
// client refuses an answer that does not verify, so the channel is not trusted by its path.
//
// It owns the protocol, the client and the server. It must not run a command for anyone
// but the peer on the socket, and the workbench side must hold nothing of lev's (token,
// keys, state).
package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Limits of the protocol.
const (
	// MaxOutput caps each of stdout and stderr: the cap lev already applies to shell
	// output (pipeline.MaxResultBytes; a test keeps the two equal).
	MaxOutput = 256 << 10
	// MaxRequest caps a request line (the script travels in argv).
	MaxRequest = 4 << 20
	// MaxResponse caps a response line as the client reads it: two full streams in
	// base64 plus the envelope. A longer one is refused, not read.
	MaxResponse = 2*(MaxOutput*4/3+4) + 64<<10
	// StreamGrace is how long a streaming command may take to exit after its stdin
	// closed (the MCP stdio shutdown) before its process group is killed.
	StreamGrace = 5 * time.Second
	// MaxDeadline bounds deadline_ms (the shell tool allows an hour).
	MaxDeadline = 2 * time.Hour
	// RequestTimeout is how long a connection may take to send its request line.
	RequestTimeout = 10 * time.Second
)

// Request is one command. Every key is exact: strictjson refuses unknown, duplicate and
// case-variant keys, so what the server runs is what any other reader of the bytes sees.
type Request struct {
	// Argv is the command; Argv[0] must be an absolute path (no PATH search in the
	// server's environment).
	Argv []string `json:"argv"`
	// Dir is the working directory (absolute).
	Dir string `json:"dir"`
	// Env is the command's whole environment ("KEY=VALUE"); the server's own is never
	// inherited.
	Env []string `json:"env"`
	// DeadlineMS is how long the command may run, in milliseconds: when it passes the
	// server kills the command's process group.
	DeadlineMS int64 `json:"deadline_ms"`
	// Network must be given: false runs the command in a new user and network namespace
	// (only a loopback of its own), or not at all.
	Network *bool `json:"network"`
	// StdoutMax and StderrMax cap what is kept of each stream (1..MaxOutput).
	StdoutMax int `json:"stdout_max"`
	StderrMax int `json:"stderr_max"`
	// Stream runs the command with its stdin and stdout on the connection (see above).
	// deadline_ms still bounds its life; stdout_max does not apply.
	Stream bool `json:"stream,omitempty"`
	// Nonce is the client's fresh random value: the answer's proof covers the request
	// line, so an answer recorded from an earlier call does not verify (auth.go).
	Nonce string `json:"nonce,omitempty"`
	// Ping asks only for a proof, running nothing (lever up's check of the channel); no
	// other key may be set with it but nonce.
	Ping bool `json:"ping,omitempty"`
}

// Response is the outcome. Error set means nothing ran (Started false) or the command
// could not be waited for; Field names the request key a refusal is about.
type Response struct {
	Error           string `json:"error,omitempty"`
	Field           string `json:"field,omitempty"`
	Started         bool   `json:"started"`
	ExitCode        int    `json:"exit_code"`
	TimedOut        bool   `json:"timed_out"`
	Stdout          []byte `json:"stdout"`
	Stderr          []byte `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// Proof is the server's HMAC, under this start's key, of the request line and of
	// this answer without it (auth.go).
	Proof string `json:"proof,omitempty"`
}

// FieldError is a refused request, naming the key.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("bench request key %q: %s", e.Field, e.Msg) }

// Validate checks a decoded request's values (strictjson has checked its keys).
func (r *Request) Validate() error {
	if r.Ping {
		if len(r.Argv) > 0 || r.Dir != "" || len(r.Env) > 0 || r.DeadlineMS != 0 || r.Network != nil || r.StdoutMax != 0 || r.StderrMax != 0 || r.Stream {
			return &FieldError{"ping", "a ping runs nothing: only nonce may be set with it"}
		}
		return nil
	}
	if len(r.Argv) == 0 {
		return &FieldError{"argv", "missing or empty: give the command as an array, argv[0] an absolute path"}
	}
	if !filepath.IsAbs(r.Argv[0]) {
		return &FieldError{"argv", fmt.Sprintf("argv[0] %q is not an absolute path", r.Argv[0])}
	}
	for i, a := range r.Argv {
		if strings.ContainsRune(a, 0) {
			return &FieldError{"argv", fmt.Sprintf("argv[%d] contains a NUL byte", i)}
		}
	}
	if r.Dir == "" || !filepath.IsAbs(r.Dir) || strings.ContainsRune(r.Dir, 0) {
		return &FieldError{"dir", fmt.Sprintf("%q is not an absolute path", r.Dir)}
	}
	seen := map[string]bool{}
	for i, kv := range r.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return &FieldError{"env", fmt.Sprintf("env[%d] %q is not KEY=VALUE", i, kv)}
		}
		if seen[k] {
			// Which one would win depends on the reader: refuse the ambiguity.
			return &FieldError{"env", fmt.Sprintf("env[%d]: %s is set twice", i, k)}
		}
		seen[k] = true
	}
	if r.DeadlineMS <= 0 || time.Duration(r.DeadlineMS)*time.Millisecond > MaxDeadline {
		return &FieldError{"deadline_ms", fmt.Sprintf("%d is not between 1 and %d", r.DeadlineMS, MaxDeadline.Milliseconds())}
	}
	if r.Network == nil {
		return &FieldError{"network", "missing: say true or false (false runs the command with no network)"}
	}
	if r.StdoutMax < 1 || r.StdoutMax > MaxOutput {
		return &FieldError{"stdout_max", fmt.Sprintf("%d is not between 1 and %d", r.StdoutMax, MaxOutput)}
	}
	if r.StderrMax < 1 || r.StderrMax > MaxOutput {
		return &FieldError{"stderr_max", fmt.Sprintf("%d is not between 1 and %d", r.StderrMax, MaxOutput)}
	}
	return nil
}

// Deadline is DeadlineMS as a duration.
func (r *Request) Deadline() time.Duration { return time.Duration(r.DeadlineMS) * time.Millisecond }

// errProtocol marks a connection that broke the one-line-each-way framing.
var errProtocol = errors.New("bench protocol")
