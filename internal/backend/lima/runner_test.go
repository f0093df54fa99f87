package lima

import (
	"os/exec"
	"strings"
	"testing"
)

// The guest's shell must receive argv exactly: hostile words are data, never syntax.
// Checked by a real POSIX shell, which is what ssh hands the command line to.
func TestShellJoinRoundTripsThroughAShell(t *testing.T) {
	cases := [][]string{
		{"iptables", "-S", "LEVER_EGRESS"},
		{"echo", "a b", "  two  spaces "},
		{"echo", "it's", `"dq"`, `back\slash`},
		{"echo", "$(touch /tmp/lever-pwned)", "`id`", "$HOME", "a;b", "a|b", "a&&b", "*", "~"},
		{"echo", "line1\nline2", "tab\there", ""},
	}
	for _, argv := range cases {
		script := "printf '%s\\0' " + shellJoin(argv[1:])
		out, err := exec.Command("/bin/sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("%q: %v", argv, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if strings.Join(got, "|") != strings.Join(argv[1:], "|") || len(got) != len(argv)-1 {
			t.Errorf("argv %q came back as %q", argv[1:], got)
		}
	}
}
