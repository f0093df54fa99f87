package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
)

func TestTermSafe(t *testing.T) {
	cases := []struct {
		name   string
		writes []string
		want   string
	}{
		{"plain text and UTF-8 pass unchanged", []string{"ok: é ü 日本 \u00a0nbsp\n\tend"}, "ok: é ü 日本 \u00a0nbsp\n\tend"},
		{"OSC 52 clipboard write", []string{"\x1b]52;c;cm0gLXJmIH4=\x07"}, `\x1b]52;c;cm0gLXJmIH4=\x07`},
		{"retitle", []string{"\x1b]0;pwned\x07"}, `\x1b]0;pwned\x07`},
		{"carriage return hides a line", []string{"rm -rf ~\rls"}, `rm -rf ~\x0dls`},
		{"CSI cursor up", []string{"\x1b[1A\x1b[2K"}, `\x1b[1A\x1b[2K`},
		{"DEL", []string{"a\x7fb"}, `a\x7fb`},
		{"8-bit CSI as UTF-8", []string{"\u009b2J"}, `\u009b2J`},
		{"8-bit CSI split across writes", []string{"x\xc2", "\x9b2J"}, `x\u009b2J`},
		{"0xC2 then a printable split across writes", []string{"\xc2", "\xa0"}, "\u00a0"},
		{"0xC2 at the very end is kept", []string{"a\xc2"}, "a\xc2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			ts := &termSafe{w: &out}
			for _, w := range tc.writes {
				if n, err := ts.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: %d %v", n, err)
				}
			}
			ts.Flush()
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

// escRecorder prints an escape sequence as the jail's output.
type escRecorder struct{ recorder }

func (r *escRecorder) Exec(ctx context.Context, name string, o containers.ExecOptions) (int, error) {
	if len(o.Argv) > 1 && o.Argv[1] == "result" {
		io.WriteString(o.Stdout, "result \x1b]0;pwned\x07 done\n")
		return 0, nil
	}
	return r.recorder.Exec(ctx, name, o)
}

// TestTermSafeThroughCommand: lever result's output reaches a host terminal (a real
// pty) with the escape sequence defused; the control is the same command writing to a
// pipe-like buffer, which gets the bytes unchanged (so the payload did reach lever).
func TestTermSafeThroughCommand(t *testing.T) {
	rec := &escRecorder{recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}}}
	cfg := unitJail(t, nil)
	attachHook = func(_ *config.Config) (execer, error) { return rec, nil }
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	var errb bytes.Buffer
	code := Main([]string{"result", "-c", cfg, "r-20261130-100000-aaaaaa"}, slave, &errb)
	slave.Close()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	master.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(master)
	if bytes.Contains(got, []byte{0x1b}) || !strings.Contains(string(got), `\x1b]0;pwned\x07 done`) {
		t.Errorf("terminal got %q", got)
	}
	var out bytes.Buffer
	if code := Main([]string{"result", "-c", cfg, "r-20261130-100000-aaaaaa"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "\x1b]0;pwned\x07") {
		t.Errorf("control: exit %d, %q", code, out.String())
	}
}
