package cli

import (
	"strings"
	"testing"
)

// TestAllowNamesAreChecked: `lev run --allow TOOL` (and the spawn API's "allow") lifted
// the ask of whatever name it was given, so a misspelt `--allow shel` lifted nothing and
// said nothing. Through the real binary, headless (an ask is a refusal): a misspelt name
// fails the spawn naming it and the tool meant; the control `--allow shell` runs the
// shell call that the same run otherwise refuses.
func TestAllowNamesAreChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	b := newBox(t, bin, "lev", "")
	b.agent("prober", proberBlueprint)
	mustWrite(t, b.script, probeCall("shell", `{"command": "echo shell-ran"}`))
	for _, r := range []struct {
		allow string
		ok    bool
		want  string
	}{
		{"shel", false, `allow "shel": unknown tool "shel" (did you mean "shell"?)`},
		{"Shell", false, `allow "Shell": unknown tool "Shell"`},
		{"mcp__a__", false, `bad MCP tool name`},
		{"shell", true, "shell-ran"},
	} {
		t.Run(r.allow, func(t *testing.T) {
			out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--headless", "--allow", r.allow)
			if (code == 0) != r.ok || !strings.Contains(out+stderr, r.want) {
				t.Fatalf("exit %d, want ok=%v and %q\nstdout %s\nstderr %s", code, r.ok, r.want, out, stderr)
			}
		})
	}
}
