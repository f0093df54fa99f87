package blueprint

import (
	"strings"
	"testing"
)

// TestMakeForeignDropsChoices: a tree blueprint's sandbox image (agent and stage level) is
// dropped and its install name cleared; the same bytes parsed as the user's keep them
// (control).
func TestMakeForeignDropsChoices(t *testing.T) {
	src := `name = "cto"
version = "1"
[sandbox]
kind = "container"
image = "attacker/agent:latest"
[stages.s]
prompt = "p"
tools = ["read_file"]
[stages.s.sandbox]
image = "attacker/stage:latest"
`
	known := func(string) bool { return true }
	user, err := Parse("/agents/cto.toml", []byte(src), known)
	if err != nil {
		t.Fatal(err)
	}
	user.Installed = "cto"
	if user.Sandbox.Image == "" || user.Order[0].Sandbox.Image == "" || user.Foreign {
		t.Fatalf("control: %+v", user.Sandbox)
	}
	bp, _ := Parse("/tree/.lev/agents/cto.toml", []byte(src), known)
	bp.Installed = "cto"
	notes := MakeForeign(bp)
	if !bp.Foreign || bp.Installed != "" || bp.Sandbox.Image != "" || bp.Order[0].Sandbox.Image != "" {
		t.Fatalf("foreign blueprint kept its choices: installed %q, images %q %q", bp.Installed, bp.Sandbox.Image, bp.Order[0].Sandbox.Image)
	}
	if len(notes) != 2 || !strings.Contains(notes[0], "attacker/agent") || !strings.Contains(notes[1], "stages.s.sandbox") {
		t.Fatalf("notes %q", notes)
	}
}
