package sandbox_test

import (
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
)

// The blueprint loader applies the sandbox package's value checks, naming key and line.
func TestBlueprintLoaderUsesSandboxValidation(t *testing.T) {
	const head = "name = \"x\"\nversion = \"1\"\n[stages.s]\nprompt = \"p\"\ntools = []\n" // lines 1-5
	for _, tc := range []struct{ src, want string }{
		{"[sandbox]\nkind = \"container\"\nmounts = [\"/ok\", \"rel/x\"]\n", `bp.toml:8: key "sandbox.mounts": mounts[1]: mount "rel/x"`},
		{"[sandbox]\nimage = \"--privileged\"\n", `bp.toml:7: key "sandbox.image"`},
		{"[sandbox]\nengine = \"podman --root /\"\n", `bp.toml:7: key "sandbox.engine"`},
		{"[sandbox]\nnetwrok = false\n", `bp.toml:7: unknown key "sandbox.netwrok"`},
		{"[stages.s.sandbox]\nmount = \"/a/../etc\"\n", `bp.toml:7: key "stages.s.sandbox.mount"`},
	} {
		_, err := blueprint.Parse("bp.toml", []byte(head+tc.src), func(string) bool { return true })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.src, err, tc.want)
		}
	}
}
