package bench_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/bench"
)

// TestAnswersProveThemselves drives the built lev bench serve through the client lev's
// shell tool uses. Positive control: the server's answers verify (a command, a ping).
// Then, with the key beside the socket no longer this start's (a server that is not the
// one that made it), or gone, every call is refused, naming why, and nothing of the
// answer is returned.
func TestAnswersProveThemselves(t *testing.T) {
	off := false
	req := bench.Request{Argv: []string{"/bin/sh", "-c", "echo REAL"}, Dir: "/", Env: []string{}, DeadlineMS: 5000, Network: &off, StdoutMax: 100, StderrMax: 100}
	sock := serve(t)
	c := bench.Client{Socket: sock}
	if r, err := c.Run(context.Background(), req); err != nil || strings.TrimSpace(string(r.Stdout)) != "REAL" || r.Proof != "" {
		t.Fatalf("control: the real server's answer: %+v %v", r, err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("control: ping: %v", err)
	}
	keyFile := filepath.Join(filepath.Dir(sock), bench.KeyFile)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T)
		want  string
		typ   any
	}{
		{"another key than the server's", func(t *testing.T) {
			if _, err := bench.NewKey(sock); err != nil {
				t.Fatal(err)
			}
		}, "its proof does not match this start's key", &bench.NotTheBenchError{}},
		{"a key that is a symlink", func(t *testing.T) {
			other := filepath.Join(t.TempDir(), "k")
			os.WriteFile(other, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
			os.Remove(keyFile)
			os.Symlink(other, keyFile)
		}, "too many levels of symbolic links", &bench.UnavailableError{}},
		{"no key", func(t *testing.T) { os.Remove(keyFile) }, "no such file", &bench.UnavailableError{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t)
			for what, call := range map[string]func() error{
				"run": func() error {
					r, err := c.Run(context.Background(), req)
					if len(r.Stdout) != 0 {
						t.Errorf("a refused answer's output was returned: %q", r.Stdout)
					}
					return err
				},
				"ping": func() error { return c.Ping(context.Background()) },
				"stream": func() error {
					_, err := c.Stream(context.Background(), req, strings.NewReader(""), &strings.Builder{})
					return err
				},
			} {
				err := call()
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: want an error containing %q, got %v", what, tc.want, err)
				}
				switch tc.typ.(type) {
				case *bench.NotTheBenchError:
					var e *bench.NotTheBenchError
					if !errors.As(err, &e) {
						t.Errorf("%s: %T, want *NotTheBenchError", what, err)
					}
				case *bench.UnavailableError:
					var e *bench.UnavailableError
					if !errors.As(err, &e) {
						t.Errorf("%s: %T, want *UnavailableError", what, err)
					}
				}
			}
		})
	}
}

// TestPingRunsNothing: a ping with any key of a command is refused, naming "ping".
func TestPingRunsNothing(t *testing.T) {
	on := true
	for _, r := range []bench.Request{
		{Ping: true, Argv: []string{"/bin/true"}},
		{Ping: true, Network: &on},
		{Ping: true, Stream: true},
		{Ping: true, DeadlineMS: 5},
	} {
		var fe *bench.FieldError
		if err := r.Validate(); !errors.As(err, &fe) || fe.Field != "ping" {
			t.Errorf("%+v: %v, want a refusal naming ping", r, err)
		}
	}
	if err := (&bench.Request{Ping: true, Nonce: "ab"}).Validate(); err != nil {
		t.Errorf("control: a bare ping: %v", err)
	}
}
