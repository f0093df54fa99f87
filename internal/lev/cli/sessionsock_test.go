package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShellCannotAskASessionServiceForLevState: a masked command cannot read lev's files,
// but a service running outside its namespaces for lev's user (systemd's user manager via
// `systemd-run --user`, a podman API socket, docker) reads whatever it is asked to. Their
// sockets live in the user's runtime directory ($XDG_RUNTIME_DIR) and a few known places.
// Through the real binary, kind none: the test serves, on a socket in $XDG_RUNTIME_DIR,
// what such a service would hand back (the token file's content); the shell must not
// reach it. Control: the same service on a socket elsewhere is reached by the same command.
func TestShellCannotAskASessionServiceForLevState(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	runtimeDir := filepath.Join(root, "run")
	os.MkdirAll(runtimeDir, 0o700)
	b := newBox(t, bin, "lev", "[tool_permissions]\nshell = \"allow\"\n", "XDG_RUNTIME_DIR="+runtimeDir)
	b.agent("prober", proberBlueprint)
	serve := func(sock string) {
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				data, _ := os.ReadFile(b.tokenFile)
				c.Write(append([]byte("service:"), data...))
				c.Close()
			}
		}()
	}
	inRuntime := filepath.Join(runtimeDir, "svc.sock")
	elsewhere := filepath.Join(root, "other.sock")
	serve(inRuntime)
	serve(elsewhere)
	// The client is this test binary (TestSessionSockHelper): nothing else that speaks to a
	// unix socket is sure to be installed.
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	py := func(sock string) string {
		return "LEVTEST_SOCK=" + sock + " " + self + " -test.run=^TestSessionSockHelper$ 2>&1 | head -c 300"
	}
	for _, r := range []struct {
		name, sock string
		reach      bool
	}{
		{"socket in XDG_RUNTIME_DIR", inRuntime, false},
		{"control: socket elsewhere", elsewhere, true},
	} {
		t.Run(r.name, func(t *testing.T) {
			mustWrite(t, b.script, probeCall("shell", `{"command": `+jsonArg(py(r.sock)+"; cat notes.txt")+`}`))
			out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
			if code != 0 || !strings.Contains(out, "notes content") {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
			}
			if got := strings.Contains(out, "service:"+levToken); got != r.reach {
				t.Fatalf("reached the service = %v, want %v:\n%s\n%s", got, r.reach, out, stderr)
			}
		})
	}
}

// TestSessionSockHelper is the socket client the shell runs above; it does nothing unless
// LEVTEST_SOCK names a socket.
func TestSessionSockHelper(t *testing.T) {
	sock := os.Getenv("LEVTEST_SOCK")
	if sock == "" {
		return
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	data, _ := io.ReadAll(c)
	fmt.Printf("%s\n", data)
}
