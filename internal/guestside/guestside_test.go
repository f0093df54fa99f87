package guestside

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// echoLev builds a stand-in lev that prints its arguments and then its stdin.
func echoLev(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import (
	"io"
	"os"
	"strings"
)

func main() {
	os.Stdout.WriteString(strings.Join(os.Args[1:], " ") + "\n")
	io.Copy(os.Stdout, os.Stdin)
}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module echolev\n\ngo 1.22\n"), 0o644)
	out := filepath.Join(dir, "lev")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building: %v: %s", err, b)
	}
	return out
}

// TestInPlaceArgv runs what InPlaceArgv plans: lev runs from its path as `__guest <mode>`
// with the request on stdin intact. An unknown mode is refused before anything runs.
func TestInPlaceArgv(t *testing.T) {
	lev := echoLev(t)
	req := []byte(`{"probes":[]}` + "\n")
	for _, tc := range []struct {
		name string
		mode string
		err  string
	}{
		{"probe", ModeProbe, ""},
		{"enrol", ModeEnrol, ""},
		{"images", ModeImages, ""},
		{"unknown mode", "shell", `unknown guest helper mode "shell"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := InPlaceArgv(lev, tc.mode)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if argv[0] != lev {
				t.Fatalf("argv %q", argv)
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdin = bytes.NewReader(req)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if want := Command + " " + tc.mode + "\n" + string(req); string(out) != want {
				t.Fatalf("lev saw %q, want %q", out, want)
			}
		})
	}
}

// TestServeRefusesUnknownMode: lev's __guest serves only the two helper modes.
func TestServeRefusesUnknownMode(t *testing.T) {
	var out bytes.Buffer
	if err := Serve("exec", strings.NewReader("{}"), &out); err == nil || !strings.Contains(err.Error(), `unknown guest helper mode "exec"`) {
		t.Fatalf("got %v", err)
	}
	// control: a known mode reaches its server (which reads the request).
	if err := Serve(ModeProbe, strings.NewReader(`{"probes":[]}`), &out); err != nil || !strings.Contains(out.String(), `"outcomes"`) {
		t.Fatalf("probe mode: %v %q", err, out.String())
	}
}

// TestArgvInPlaceRefusesWritableLev: run in place as root, a lev that another user could
// replace (its dir is world-writable, it is group-writable, or another user owns it) is
// refused; the same binary in a private dir runs (the control).
func TestArgvInPlaceRefusesWritableLev(t *testing.T) {
	lev := echoLev(t)
	data, _ := os.ReadFile(lev)
	put := func(dirMode, fileMode os.FileMode, chownTo int) string {
		d := filepath.Join(t.TempDir(), "bin")
		os.Mkdir(d, 0o700)
		p := filepath.Join(d, "lev")
		if err := os.WriteFile(p, data, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, fileMode)
		os.Chmod(d, dirMode)
		if chownTo >= 0 {
			if err := os.Chown(p, chownTo, chownTo); err != nil {
				t.Skipf("chown needs root: %v", err)
			}
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		p       string
		refused bool
	}{
		{"private dir (control)", put(0o755, 0o755, -1), false},
		{"world-writable dir", put(0o777, 0o755, -1), true},
		{"group-writable binary", put(0o755, 0o775, -1), true},
		{"owned by another user", put(0o755, 0o755, 65534), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := InPlaceArgv(tc.p, ModeProbe)
			if tc.refused != (err != nil) {
				t.Fatalf("refused=%v: %v", tc.refused, err)
			}
			if tc.refused && !strings.Contains(err.Error(), "can be changed by someone else") {
				t.Fatalf("refusal %q does not say why", err)
			}
		})
	}
}

// TestArgvInPlaceRunsTheCheckedFile: a name for lev that is a symlink in a directory anyone
// can write passes the check (its target is root's) but could be swapped after it; the
// argv names the checked file, never the link. Control: the link does reach that file.
func TestArgvInPlaceRunsTheCheckedFile(t *testing.T) {
	lev := echoLev(t)
	data, _ := os.ReadFile(lev)
	safe := filepath.Join(t.TempDir(), "bin")
	os.Mkdir(safe, 0o755)
	real := filepath.Join(safe, "lev")
	if err := os.WriteFile(real, data, 0o755); err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	os.Chmod(open, 0o777|os.ModeSticky)
	link := filepath.Join(open, "lev")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	argv, err := InPlaceArgv(link, ModeProbe)
	if err != nil {
		t.Fatalf("control: a link to a root-owned lev is refused: %v", err)
	}
	want, _ := filepath.EvalSymlinks(real)
	if argv[0] != want {
		t.Fatalf("argv runs %q, want the checked file %q (not the swappable link)", argv[0], want)
	}
}
