package guest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
)

func TestArgvShape(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"env", "LEVER_TICKET=s3cret", "A=b", "sh", "-s", "--", "x"}, "env LEVER_TICKET=… A=… sh -s -- x"},
		{[]string{"id", "-u", "lever"}, "id -u lever"},
		// env's options do not end the prefix: what follows them is still hidden
		{[]string{"env", "-i", "-u", "HOME", "KEY=s3cret", "sh"}, "env -i -u HOME KEY=… sh"},
		{[]string{"env", "--unset=X", "KEY=s3cret", "sh"}, "env --unset=X KEY=… sh"},
		// only a leading env's assignments are hidden; later words are kept (cut when long)
		{[]string{"sh", "-c", "K=v; " + strings.Repeat("x", 60)}, "sh -c K=v; " + strings.Repeat("x", 43) + "…"},
		{nil, ""},
	} {
		if got := guest.ArgvShape(tc.argv); got != tc.want {
			t.Errorf("ArgvShape(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

func TestTracedWritesOneLinePerCallWithoutSecrets(t *testing.T) {
	inner := (&guesttest.Runner{}).On("any", func(guest.Cmd) bool { return true }, guesttest.OK("x"))
	var out bytes.Buffer
	tr := &guest.Traced{Inner: inner, Out: &out}
	for i := 0; i < 2; i++ {
		if _, err := tr.Run(context.Background(), guest.Cmd{As: guest.Root, Argv: []string{"env", "KEY=sk-secret", "sh", "-s"}, Stdin: []byte("echo sk-secret")}); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "guest call 1: at +0.00s") || !strings.HasPrefix(lines[1], "guest call 2:") {
		t.Fatalf("trace:\n%s", out.String())
	}
	if strings.Contains(out.String(), "sk-secret") || !strings.Contains(lines[0], "as root rc=0: env KEY=… sh -s (stdin 14 B") {
		t.Errorf("trace line: %s", lines[0])
	}
	if len(inner.Calls()) != 2 {
		t.Errorf("inner runner got %d calls, want 2 (the trace forwards each)", len(inner.Calls()))
	}
}

// TestParseTraceReadsTracedLines: what Traced writes, ParseTrace reads back (a call that
// answered, whatever its status, and one that failed), and other lines are skipped.
func TestParseTraceReadsTracedLines(t *testing.T) {
	inner := (&guesttest.Runner{}).
		On("fails", guesttest.Script("fail"), func(guest.Cmd) (guest.Result, error) { return guest.Result{}, errors.New("ssh: down") }).
		On("exits 3", guesttest.Script("three"), guesttest.Exit(3, "")).
		On("any", func(guest.Cmd) bool { return true }, guesttest.OK(""))
	var out bytes.Buffer
	tr := &guest.Traced{Inner: inner, Out: &out}
	for _, script := range []string{"fail", "three", "ok"} {
		tr.Run(context.Background(), guest.Cmd{As: guest.Root, Argv: []string{"sh", "-c", script}})
	}
	out.WriteString("not a trace line\n")
	calls := guest.ParseTrace(out.String())
	if len(calls) != 3 {
		t.Fatalf("read %d calls from:\n%s", len(calls), out.String())
	}
	for i, want := range []bool{false, true, true} {
		if c := calls[i]; c.N != i+1 || c.Answered != want || c.At < 0 || c.Took < 0 {
			t.Errorf("call %d read as %+v, want number %d answered %v", i, c, i+1, want)
		}
	}
}

func TestTraceFromEnv(t *testing.T) {
	inner := (&guesttest.Runner{}).On("any", func(guest.Cmd) bool { return true }, guesttest.OK(""))
	t.Setenv(guest.TraceEnv, "")
	if r := guest.TraceFromEnv(inner); r != guest.Runner(inner) {
		t.Fatalf("unset: got %T, want the runner itself", r)
	}
	p := filepath.Join(t.TempDir(), "trace")
	t.Setenv(guest.TraceEnv, p)
	r := guest.TraceFromEnv(inner)
	if _, err := r.Run(context.Background(), guest.Cmd{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(b), "guest call 1:") || !strings.Contains(string(b), ": true (stdin 0 B") {
		t.Fatalf("trace file: %q %v", b, err)
	}
}
