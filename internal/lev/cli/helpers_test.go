package cli

// The helpers lev's CLI tests share: the lev binary, running it, and the files and
// addresses its runs need. A test file keeps only what it alone uses.

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// levBuild is the lev binary, built once for the whole test binary (go build of cmd/lev
// takes seconds on a loaded machine, and some thirty tests drive it); TestMain removes it.
var levBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if levBuild.dir != "" {
		os.RemoveAll(levBuild.dir)
	}
	os.Exit(code)
}

// buildLev returns the path of a lev binary built from this tree. No test changes it.
func buildLev(t *testing.T) string {
	t.Helper()
	levBuild.once.Do(func() {
		levBuild.dir, levBuild.err = os.MkdirTemp("", "levcli-bin-")
		if levBuild.err != nil {
			return
		}
		levBuild.bin = filepath.Join(levBuild.dir, "lev")
		cmd := exec.Command("go", "build", "-o", levBuild.bin, "github.com/lever-jail/lever/cmd/lev")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		levBuild.out, levBuild.err = cmd.CombinedOutput()
	})
	if levBuild.err != nil {
		t.Fatalf("go build: %v\n%s", levBuild.err, levBuild.out)
	}
	return levBuild.bin
}

// runLev runs bin with args and exactly env, and returns its stdout, stderr and exit code.
func runLev(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runLevIn(t, bin, "", env, args...)
}

// runLevIn is runLev started in dir ("": the test's own working directory).
func runLevIn(t *testing.T, bin, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// mustWrite writes s to p, making its directory.
func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// jsonArg is s as a JSON string, for a scripted call's arguments or a TOML value.
func jsonArg(s string) string { b, _ := json.Marshal(s); return string(b) }

// freeAddr is a loopback address nothing listens on (at the time of the call).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// stopDaemon stops the daemon whose pid file is pidFile: SIGTERM, up to 5 s to exit, then
// SIGKILL. A missing or unreadable pid file means there is none.
func stopDaemon(pidFile string) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 50 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}
