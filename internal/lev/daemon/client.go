package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// Client talks to a lev daemon.
type Client struct {
	Base  string // http://127.0.0.1:7447
	Token string
	HTTP  *http.Client
	// Transport, when set, carries every request (a unix socket's dialer); nil: the default.
	Transport http.RoundTripper
}

// UnixPrefix marks a listen address that is a unix socket: unix:/abs/path.sock.
const UnixPrefix = "unix:"

// SocketPath returns the socket of a unix: listen address, checked absolute.
func SocketPath(listen string) (string, bool, error) {
	p, ok := strings.CutPrefix(listen, UnixPrefix)
	if !ok {
		return "", false, nil
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", true, fmt.Errorf("listen address %q: a unix socket needs a clean absolute path (unix:/abs/path.sock)", listen)
	}
	return p, true, nil
}

// NewClient is a client for the daemon at listen (host:port, or unix:/abs/path.sock).
func NewClient(listen, token string) (*Client, error) {
	sock, isUnix, err := SocketPath(listen)
	if err != nil {
		return nil, err
	}
	if !isUnix {
		return &Client{Base: "http://" + listen, Token: token}, nil
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		MaxIdleConns: 4,
	}
	// The host part is never dialled; it names the daemon in errors and logs.
	return &Client{Base: "http://lev", Token: token, Transport: tr}, nil
}

// APIError is a non-2xx reply.
type APIError struct {
	Code int
	Msg  string
}

func (e *APIError) Error() string { return e.Msg }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body *bytes.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	} else {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second, Transport: c.Transport}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	data, err := capread.Body(resp)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(data, &e)
		if e.Error == "" {
			e.Error = fmt.Sprintf("HTTP %d", resp.StatusCode)
		}
		return &APIError{Code: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Health reports whether a daemon answers.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/api/health", nil, nil)
}

// Spawn starts a run.
func (c *Client) Spawn(ctx context.Context, spec runner.Spec) (*runner.Record, error) {
	rec := &runner.Record{}
	return rec, c.do(ctx, http.MethodPost, "/api/agents", spec, rec)
}

// Get reads a run's record.
func (c *Client) Get(ctx context.Context, id string) (*runner.Record, error) {
	rec := &runner.Record{}
	return rec, c.do(ctx, http.MethodGet, "/api/agents/"+id, nil, rec)
}

// Result reads a run's result; a run not completed is an APIError with code 409.
func (c *Client) Result(ctx context.Context, id string) (*Result, error) {
	res := &Result{}
	return res, c.do(ctx, http.MethodGet, "/api/agents/"+id+"/result", nil, res)
}

// Resume resumes a run; interactive says whether somebody will answer its prompts now.
func (c *Client) Resume(ctx context.Context, id string, interactive bool) (*runner.Record, error) {
	rec := &runner.Record{}
	return rec, c.do(ctx, http.MethodPost, "/api/agents/"+id+"/resume", ResumeRequest{Interactive: interactive}, rec)
}

// Answer answers an interactive run's pending question.
func (c *Client) Answer(ctx context.Context, id, question, answer string) error {
	return c.do(ctx, http.MethodPost, "/api/agents/"+id+"/answer", Answer{Question: question, Answer: answer}, nil)
}

// List lists runs.
func (c *Client) List(ctx context.Context) ([]*runner.Record, error) {
	var recs []*runner.Record
	return recs, c.do(ctx, http.MethodGet, "/api/agents", nil, &recs)
}

// Wait polls a run until it is no longer running.
func (c *Client) Wait(ctx context.Context, id string, every time.Duration) (*runner.Record, error) {
	for {
		rec, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec.Status != runner.StatusRunning {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-time.After(every):
		}
	}
}

// EnsureToken returns the token, creating a random one (mode 0600) when neither LEV_TOKEN
// nor the file exists: only the command that auto-starts the daemon does this; lev serve
// itself refuses to start without one.
func EnsureToken(file string) (string, error) {
	if t, err := ReadToken(file); err == nil {
		return t, nil
	} else if _, serr := os.Stat(file); serr == nil {
		return "", err // exists but bad: do not overwrite
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	t := hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("creating token file: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(t + "\n"); err != nil {
		return "", err
	}
	return t, nil
}

// StartDetached starts `<exe> serve` in its own session, logging to logFile, and waits for
// it to answer.
func StartDetached(ctx context.Context, c *Client, exe string, args []string, logFile string) error {
	if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.Health(ctx); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the daemon exited at start (%v); see %s", err, logFile)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("the daemon did not answer within 15s; see " + logFile)
}
