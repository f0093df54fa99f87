//go:build linux

package pipeline

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSearchSkipsLevState: lev's home inside the workdir (a jail's tree) is never searched:
// its files are skipped, and the result says something was.
func TestSearchSkipsLevState(t *testing.T) {
	e, home := levHomeEnv(t)
	e.stage.Tools = append(e.stage.Tools, "grep")
	mustWrite(t, filepath.Join(home, "runs", "r1", "messages.json"), "NEEDLE in lev state")
	mustWrite(t, filepath.Join(e.wd, "mine.txt"), "NEEDLE in the workdir")
	_, res := e.call("grep", map[string]any{"pattern": "NEEDLE"})
	if res.IsError || !strings.Contains(res.Content, "mine.txt:1:NEEDLE in the workdir") {
		t.Fatalf("positive control: %s", res.Content)
	}
	if strings.Contains(res.Content, "lev state") || !strings.Contains(res.Content, "the read fence refuses") {
		t.Fatalf("lev's state searched, or silently: %s", res.Content)
	}
}
