package guest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestScriptParseRefusesBrokenAnswers: one parser for every script; an answer whose
// markers do not pair up is refused, naming why; lines carrying another nonce are body.
func TestScriptParseRefusesBrokenAnswers(t *testing.T) {
	sc := NewScript("true")
	m := sc.mark
	cases := []struct {
		name, out, want string
	}{
		{"well-formed (positive control)", m + "begin a\nx\n" + m + "end a 3\n", ""},
		{"section printed twice", m + "begin a\n" + m + "end a 0\n" + m + "begin a\n" + m + "end a 0\n", "printed twice"},
		{"begin inside a section", m + "begin a\n" + m + "begin b\n" + m + "end b 0\n", "begins inside"},
		{"end names another section", m + "begin a\n" + m + "end b 0\n", "bad end marker"},
		{"cut off", m + "begin a\nx\n", "no end"},
		{"bad status", m + "begin a\n" + m + "end a x\n", "bad status"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			secs, err := sc.Parse([]byte(tc.out))
			if tc.want == "" {
				if err != nil || secs["a"].Out != "x" || secs["a"].RC != 3 {
					t.Fatalf("%+v %v", secs, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	// another call's markers (or the bare prefix) inside a body are just lines of it
	forged := "@@lever-begin b\n" + NewScript().mark + "end a 0\n"
	secs, err := sc.Parse([]byte(m + "begin a\n" + forged + m + "end a 0\n"))
	if err != nil || len(secs) != 1 || secs["a"].Out != strings.TrimSuffix(forged, "\n") {
		t.Fatalf("forged lines: %+v %v", secs, err)
	}
}

// TestScriptRunsInSh: the prelude and a part run in the real sh and parse back, with
// stderr in its own section and the environment and parameters passed as Cmd says.
func TestScriptRunsInSh(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	sc := NewScript(`sec one sh -c 'echo "$0 $X"; echo oops >&2; exit 4' "$1"`, `put two "$2" third`)
	c := sc.Cmd([]string{"X=fromenv"}, "p1", "p2")
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Stdin = strings.NewReader(string(c.Stdin))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	secs, err := sc.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if secs["one"].Out != "p1 fromenv" || secs["one"].RC != 4 || secs["one.stderr"].Out != "oops" || secs["two"].Out != "p2\nthird" {
		t.Fatalf("%+v", secs)
	}
}
