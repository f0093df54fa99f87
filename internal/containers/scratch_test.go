package containers

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestScratchTmpfs: every planned container, lev's and the workbench, gets a writable,
// size-limited tmpfs at /tmp (its HOME) as an explicit mount in the create request podman's
// REST service decodes; the request no longer leans on read_write_tmpfs, which podman 4.3's
// service does not know and drops (what left /tmp read-only).
func TestScratchTmpfs(t *testing.T) {
	cs, err := Plan(planParams())
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 6 {
		t.Fatalf("%d containers, want 6", len(cs))
	}
	for _, c := range cs {
		t.Run(c.Name, func(t *testing.T) {
			if c.ScratchBytes != DefaultScratchBytes {
				t.Errorf("ScratchBytes %d, want %d", c.ScratchBytes, DefaultScratchBytes)
			}
			// the bench's HOME is the plan's; lev's comes with its image (levimage: HOME=/tmp)
			if c.Role == Bench && c.Env["HOME"] != ScratchDir {
				t.Errorf("HOME=%q, want the scratch dir %s", c.Env["HOME"], ScratchDir)
			}
			b, err := json.Marshal(Spec(c))
			if err != nil {
				t.Fatal(err)
			}
			var req struct {
				ReadOnly bool `json:"read_only_filesystem"`
				Mounts   []struct {
					Type, Destination string
					Options           []string
				} `json:"mounts"`
				RWTmpfs *bool `json:"read_write_tmpfs"`
			}
			if err := json.Unmarshal(b, &req); err != nil {
				t.Fatal(err)
			}
			if !req.ReadOnly {
				t.Error("root not read-only")
			}
			if req.RWTmpfs != nil {
				t.Errorf("read_write_tmpfs=%v still sent (podman 4.3 ignores it)", *req.RWTmpfs)
			}
			var tmp []string
			for _, m := range req.Mounts {
				if m.Destination == ScratchDir {
					tmp = append(tmp, m.Type+" "+strings.Join(m.Options, ","))
				}
			}
			if want := "tmpfs rw,nosuid,nodev,exec,mode=1777,notmpcopyup,U,size=268435456"; len(tmp) != 1 || tmp[0] != want {
				t.Errorf("mounts at /tmp: %q, want exactly [%q]", tmp, want)
			}
		})
	}
	// The size is the plan's: a container planned with another size gets it, and the
	// hash sees the difference (a changed scratch replaces the container).
	c := cs[0]
	c2 := c
	c2.ScratchBytes = 64 << 20
	if c.Hash() == c2.Hash() {
		t.Error("the scratch size is not in the container's hash")
	}
	if m := scratchMount(c2.ScratchBytes); m.Options[len(m.Options)-1] != "size=67108864" {
		t.Errorf("64 MiB scratch: %v", m.Options)
	}
}
