package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenUnixSocket: unix:/abs/path listens on a socket of mode 0600 (whatever the
// umask), replaces a stale socket nobody answers on, and refuses, naming the path: a
// regular file in the way (it is not ours to delete), a socket a live daemon answers on,
// a relative or unclean path. host:port still listens on TCP (control).
func TestListenUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "levl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, c := range []struct {
		name  string
		setup func(p string) func()
		addr  func(p string) string
		want  string // "" = listens
	}{
		{"fresh socket", func(string) func() { return func() {} }, func(p string) string { return "unix:" + p }, ""},
		{"stale socket replaced", func(p string) func() {
			ln, _ := net.Listen("unix", p)
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close()
			return func() {}
		}, func(p string) string { return "unix:" + p }, ""},
		{"live daemon on it", func(p string) func() {
			ln, _ := net.Listen("unix", p)
			return func() { ln.Close() }
		}, func(p string) string { return "unix:" + p }, "another daemon answers"},
		{"regular file in the way", func(p string) func() {
			os.WriteFile(p, []byte("keep me"), 0o644)
			return func() {}
		}, func(p string) string { return "unix:" + p }, "is not a socket"},
		{"relative path", func(string) func() { return func() {} }, func(string) string { return "unix:rel.sock" }, "clean absolute path"},
		{"unclean path", func(string) func() { return func() {} }, func(p string) string { return "unix:" + filepath.Dir(p) + "/../x.sock" }, "clean absolute path"},
		{"tcp (control)", func(string) func() { return func() {} }, func(string) string { return "127.0.0.1:0" }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".sock")
			cleanup := c.setup(p)
			defer cleanup()
			addr := c.addr(p)
			ln, err := Listen(addr)
			if c.want != "" {
				if err == nil {
					ln.Close()
					t.Fatalf("Listen(%s) succeeded, want %q", addr, c.want)
				}
				if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), strings.TrimPrefix(addr, "unix:")) {
					t.Fatalf("Listen(%s): %v, want %q naming the path", addr, err, c.want)
				}
				if c.name == "regular file in the way" {
					if b, _ := os.ReadFile(p); string(b) != "keep me" {
						t.Fatalf("the file in the way was changed")
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Listen(%s): %v", addr, err)
			}
			defer ln.Close()
			if strings.HasPrefix(addr, "unix:") {
				st, err := os.Lstat(p)
				if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
					t.Fatalf("socket %s: %v %v", p, st.Mode(), err)
				}
				if ln.Addr().Network() != "unix" {
					t.Fatalf("network %s", ln.Addr().Network())
				}
			} else if ln.Addr().Network() != "tcp" {
				t.Fatalf("control: network %s", ln.Addr().Network())
			}
		})
	}
}
