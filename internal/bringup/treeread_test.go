package bringup

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// TestUpTrustCheckBoundedReads: lever up's trust check (the .git files it reads to
// protect the repositories, Instance.Containers) against what an agent can leave in the
// tree: a 10 GiB sparse .git file, a FIFO, a worker's dir swapped for a link out of the
// tree. Each is refused with an error naming the file (and the cap), at once (a FIFO is
// never waited on), allocating next to nothing; a small gitdir file is the control that
// is read (its repository is protected).
func TestUpTrustCheckBoundedReads(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, wb string)
		want  string
	}{
		{"a 10 GiB sparse .git file", func(t *testing.T, wb string) {
			f, err := os.Create(filepath.Join(wb, ".git"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(10 << 30); err != nil {
				t.Fatal(err)
			}
		}, "wb/.git is 10737418240 bytes, more than the 65536 lever reads from it"},
		{"a FIFO", func(t *testing.T, wb string) {
			if err := syscall.Mkfifo(filepath.Join(wb, ".git"), 0o600); err != nil {
				t.Skip(err)
			}
		}, "wb/.git is neither a directory nor a gitdir file"},
		{"the worker's dir a link out of the tree", func(t *testing.T, wb string) {
			out := t.TempDir()
			os.WriteFile(filepath.Join(out, ".git"), []byte("gitdir: /x\n"), 0o644)
			os.Remove(wb)
			if err := os.Symlink(out, wb); err != nil {
				t.Fatal(err)
			}
		}, "wb/.git: a symlink is on the path"},
		{"control: a gitdir file naming a repository in the tree", func(t *testing.T, wb string) {
			os.WriteFile(filepath.Join(wb, ".git"), []byte("gitdir: ../repos/wb.git\n"), 0o644)
			os.MkdirAll(filepath.Join(filepath.Dir(wb), "repos", "wb.git"), 0o755)
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := t.TempDir()
			wb := filepath.Join(tree, "wb")
			if err := os.MkdirAll(wb, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, wb)
			cfg := &config.Config{Name: "t", Egress: "open", Git: config.GitReadOnly, TreePath: tree,
				Workers: []config.Worker{{Name: "b", Dir: "wb"}}, Broker: config.Broker{JailPort: 7443}}
			in := &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", prepared: true}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			cs, err := in.Containers(Facts{AliasV4: "10.0.0.1"})
			runtime.ReadMemStats(&after)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				var ro []string
				for _, c := range cs {
					for _, m := range c.Mounts {
						if m.ReadOnly && c.Name == "lever-t-worker-b-bench" && strings.HasPrefix(m.Dest, "/lever/") {
							ro = append(ro, m.Dest)
						}
					}
				}
				if got := strings.Join(ro, " "); !strings.Contains(got, "/lever/wb/.git") {
					t.Errorf("control: worker b's read-only mounts %q lack its .git", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
				t.Errorf("the refusal allocated %d bytes", n)
			}
		})
	}
}
