// Package levtest builds stand-in lev binaries for tests: a tiny static Go program
// cross-compiled for a given GOOS/GOARCH, so the architecture checks and the helper
// choice are tested with real ELF (and Mach-O) files on any build machine. Tests only: no
// production package may import it.
package levtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Binary builds, in t's temp dir, a static program for goos/goarch whose bytes differ per
// platform (each prints its own name), and returns its path. Go's build cache makes every
// build after the first per platform a link only.
func Binary(t testing.TB, goos, goarch string) string {
	t.Helper()
	key := goos + "-" + goarch
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(\"lev stand-in "+key+"\") }\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module levstandin\n\ngo 1.22\n"), 0o644)
	out := filepath.Join(dir, "lev-"+key)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a %s lev stand-in: %v: %s", key, err, b)
	}
	return out
}
