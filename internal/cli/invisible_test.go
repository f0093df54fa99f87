package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
)

// invisiblePayload is what a prompt-injected agent writes to hide text from the person
// reading lever's output: a tag-character instruction, a zero-width split, a
// right-to-left override, a line separator, a soft hyphen and a supplementary variation
// selector; the emoji with its colour selector is ordinary text.
const invisiblePayload = "done \U000e0072\U000e006d r\u200bm \u202ehs.exe a\u2028b pass\u00adword x\U000e0100 ❤\ufe0f"

// invisibleShown is invisiblePayload as a terminal must get it.
const invisibleShown = `done \U000e0072\U000e006d r\u200bm \u202ehs.exe a\u2028b pass\u00adword x\U000e0100 ` + "❤\ufe0f"

// invisibleRecorder answers lever result with the payload, and is a terminal session
// writing it as a progress line for run and logs.
type invisibleRecorder struct{ recorder }

func (r *invisibleRecorder) Exec(ctx context.Context, name string, o containers.ExecOptions) (int, error) {
	if len(o.Argv) > 1 && o.Argv[1] == "ps" {
		return r.recorder.Exec(ctx, name, o)
	}
	io.WriteString(o.Stdout, "lev: #3 tool shell: "+invisiblePayload+"\r\n")
	return 0, nil
}

// hidden is the first rune of s a terminal would draw as nothing or reorder with.
func hidden(s string) (string, bool) {
	for i, r := range s {
		switch {
		case r >= 0xe0000 && r <= 0xe0fff, r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e,
			r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029, r == 0xad, r == 0xfeff:
			return s[i:], true
		}
	}
	return "", false
}

// TestInvisibleThroughCommands: lever run, logs, resume and result at a real terminal
// show every invisible character of the payload escaped; the emoji passes. The control is
// the same result to a pipe, which keeps the bytes (so the payload reached lever's
// printing).
func TestInvisibleThroughCommands(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"run", []string{"run"}},
		{"logs --follow", []string{"logs", "-f", "r-20261130-100000-aaaaaa"}},
		{"resume", []string{"resume", "r-20261130-100000-aaaaaa"}},
		{"result", []string{"result", "r-20261130-100000-aaaaaa"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &invisibleRecorder{recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}}}
			cfg := unitJail(t, nil)
			attachHook = func(*config.Config) (execer, error) { return rec, nil }
			h := openHostTerminal(t, true)
			var errb bytes.Buffer
			if code := Main(withConfig(tc.args, cfg), h.slave, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			got := h.shows(t)
			if rest, bad := hidden(got); bad {
				t.Errorf("an invisible character reaches the terminal at %q", rest)
			}
			if rest, bad := control(got); bad {
				t.Errorf("a control reaches the terminal at %q", rest)
			}
			if !strings.Contains(got, invisibleShown) {
				t.Errorf("terminal got %q, want it to hold %q", got, invisibleShown)
			}
		})
	}
	rec := &invisibleRecorder{recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}}}
	cfg := unitJail(t, nil)
	attachHook = func(*config.Config) (execer, error) { return rec, nil }
	var out, errb bytes.Buffer
	if code := Main([]string{"result", "-c", cfg, "r-20261130-100000-aaaaaa"}, &out, &errb); code != 0 || !strings.Contains(out.String(), invisiblePayload) {
		t.Errorf("control: a pipe got exit %d %q", code, out.String())
	}
}

// TestInvisibleInPs: a blueprint's name holding tag characters and a bidi override
// (lev ps's records come from the jail) is escaped in lever ps at a terminal and in
// lever ps --json anywhere, and decodes to the same name (the control: the name reached
// lever intact).
func TestInvisibleInPs(t *testing.T) {
	const evil = "docs\U000e0041\u202ebot"
	runs := `[{"id":"r-20261130-100000-aaaaaa","agent":"` + evil + `","status":"failed","created":"2026-11-30T10:00:00Z"}]`
	for _, asJSON := range []bool{false, true} {
		rec := &recorder{runs: map[string]string{mgrC: runs, docsC: runsW1}}
		cfg := unitJail(t, rec)
		args := []string{"ps", "-c", cfg}
		if asJSON {
			args = append(args, "--json")
		}
		h := openHostTerminal(t, false)
		var errb bytes.Buffer
		if code := Main(args, h.slave, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		got := h.shows(t)
		if rest, bad := hidden(got); bad {
			t.Errorf("json=%v: an invisible character reaches the terminal at %q", asJSON, rest)
		}
		if !asJSON {
			if !strings.Contains(got, `docs\U000e0041\u202ebot`) {
				t.Errorf("ps got %q", got)
			}
			continue
		}
		if !utf8.ValidString(got) || !strings.Contains(got, `docs\udb40\udc41\u202ebot`) {
			t.Errorf("ps --json got %q", got)
		}
		var ps struct {
			Runs []struct {
				Run struct {
					Agent string `json:"agent"`
				} `json:"run"`
			} `json:"runs"`
		}
		if err := json.Unmarshal([]byte(got), &ps); err != nil || len(ps.Runs) == 0 {
			t.Fatalf("not JSON: %v %s", err, got)
		}
		found := false
		for _, r := range ps.Runs {
			found = found || r.Run.Agent == evil
		}
		if !found {
			t.Errorf("control: the name did not decode back to %q: %s", evil, got)
		}
	}
}
