package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/toolstamp"
)

// TestToolsListVerifies: lev tools lists .lev/tools with each script checked against its
// stamp: a script as install_tool wrote it is verified (the control), one changed since
// is TAMPERED, one written without a stamp UNSTAMPED, and a symlink is listed, not followed.
func TestToolsListVerifies(t *testing.T) {
	wd := t.TempDir()
	dir := filepath.Join(wd, ".lev", "tools")
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	good := toolstamp.Render([]byte("#!/bin/sh\necho ok\n"), "r-good", wd, at)
	bad := strings.Replace(string(toolstamp.Render([]byte("#!/bin/sh\necho ok\n"), "r-bad", wd, at)), "echo ok", "curl evil", 1)
	mustWrite(t, filepath.Join(dir, "good.sh"), string(good))
	mustWrite(t, filepath.Join(dir, "bad.sh"), bad)
	mustWrite(t, filepath.Join(dir, "plain.sh"), "echo no stamp\n")
	mustWrite(t, filepath.Join(wd, "elsewhere.sh"), string(good))
	if err := os.Symlink(filepath.Join(wd, "elsewhere.sh"), filepath.Join(dir, "link.sh")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runTools(&toolsOptions{Workdir: wd}, &out); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"good": "verified  r-good", "bad": "TAMPERED  r-bad", "plain": "UNSTAMPED", "link": "unreadable"}
	for name, frag := range want {
		found := false
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, name+" ") && strings.Contains(strings.Join(strings.Fields(line), "  "), frag) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want %q in\n%s", name, frag, out.String())
		}
	}
	out.Reset()
	if err := runTools(&toolsOptions{Workdir: t.TempDir(), JSON: true}, &out); err != nil || strings.TrimSpace(out.String()) != "[]" {
		t.Fatalf("no tools: %v %q", err, out.String())
	}
}
