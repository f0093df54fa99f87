package bringup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/imagebuild"
	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/levimage/levtest"
)

// builtJail is healthyJail with lever's own lev image (built from a static lev) and the
// default workbench (from the guest's Debian packages), neither in podman yet.
func builtJail(t *testing.T) (*tjail, string) {
	t.Helper()
	j := healthyJail(t)
	lev := levtest.Binary(t, "linux", runtime.GOARCH)
	im, err := levimage.Build(levimage.Spec{LevBinary: lev, Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	in := j.in
	in.cfg.Lev.Image, in.cfg.Lev.BaseImage = "", ""
	in.source = levimage.Source{Kind: levimage.Built, Path: lev}
	in.imageRef, in.levBin, in.levErr = im.Ref, lev, nil
	if in.levDigest, err = levimage.FileDigest(lev); err != nil {
		t.Fatal(err)
	}
	j.pod.images = map[string]bool{}
	return j, in.benchTree(levimage.WorkbenchRef(baseDebian, strings.Repeat("5", 64), in.levDigest))
}

// gatherReply is a dpkg database holding each workbench package, one file each.
func gatherReply(guest.Cmd) []guesttest.Sec {
	var status, lists strings.Builder
	for _, w := range levimage.WorkbenchPackages {
		p := strings.Split(w, "|")[0]
		fmt.Fprintf(&status, "Package: %s\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1\n\n", p)
		fmt.Fprintf(&lists, "/var/lib/dpkg/info/%s.list:/usr\n/var/lib/dpkg/info/%s.list:/usr/bin\n/var/lib/dpkg/info/%s.list:/usr/bin/%s\n", p, p, p, p)
	}
	return []guesttest.Sec{{Name: "arch", Out: "amd64"}, {Name: "statussum", Out: strings.Repeat("5", 64)},
		{Name: "status", Out: status.String()}, {Name: "lists", Out: lists.String()}, {Name: "rootlinks"},
		{Name: "altlinks"}, {Name: "certs"}, {Name: "end"}}
}

// TestImageStepBuildsInGuest: lever's lev and the default workbench are trees made by
// ONE guest helper call (lev __guest images), never images loaded over the podman
// socket: the request names the trees the host computed, exactly the planned paths and
// every mount destination of the containers that run each tree (a worker's dir among
// them), and the step fails, naming the cause, when the helper fails, answers nonsense,
// or leaves out a tree it was asked for.
func TestImageStepBuildsInGuest(t *testing.T) {
	ok := func(j *tjail, req imagebuild.Request) (guest.Result, error) {
		b, _ := json.Marshal(imagebuild.Response{Lev: &imagebuild.LevTree{},
			Bench: &imagebuild.BenchTree{RootDirStats: levimage.RootDirStats{Entries: 42, Linked: 30, Copied: 2, Stripped: 1}}})
		return guest.Result{Stdout: b}, nil
	}
	cases := []struct {
		name  string
		reply func(j *tjail, req imagebuild.Request) (guest.Result, error)
		want  string // "" = success
	}{
		{"success", ok, ""},
		{"helper fails", func(*tjail, imagebuild.Request) (guest.Result, error) {
			return guest.Result{ExitCode: 1, Stderr: []byte("making the workbench tree: input/output error")}, nil
		}, "exited 1: making the workbench tree: input/output error"},
		{"guest unreachable", func(*tjail, imagebuild.Request) (guest.Result, error) {
			return guest.Result{}, errors.New("ssh: connection reset")
		}, "connection reset"},
		{"answer is not the helper's", func(*tjail, imagebuild.Request) (guest.Result, error) {
			return guest.Result{Stdout: []byte("Welcome to Debian\n")}, nil
		}, "reading the guest's image helper"},
		{"no word of lev's tree", func(*tjail, imagebuild.Request) (guest.Result, error) {
			b, _ := json.Marshal(imagebuild.Response{Bench: &imagebuild.BenchTree{}})
			return guest.Result{Stdout: b}, nil
		}, "did not make lev's tree"},
		{"no word of the workbench", func(*tjail, imagebuild.Request) (guest.Result, error) {
			b, _ := json.Marshal(imagebuild.Response{Lev: &imagebuild.LevTree{}})
			return guest.Result{Stdout: b}, nil
		}, "did not make the workbench's tree"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, benchRef := builtJail(t)
			var got *imagebuild.Request
			j.r.On("gather", guesttest.Script("sec statussum state_digest"), guesttest.Sections(gatherReply))
			j.r.On("images", guesttest.Script(guestside.Command+"\x00"+guestside.ModeImages), func(c guest.Cmd) (guest.Result, error) {
				var req imagebuild.Request
				if err := json.Unmarshal(c.Stdin, &req); err != nil {
					t.Fatalf("the helper's request is not JSON: %v", err)
				}
				if c.As != guest.Root {
					t.Errorf("the image helper runs as %v, want root (it reads the package files)", c.As)
				}
				got = &req
				return tc.reply(j, req)
			})
			f := Facts{UID: testUID, Podman: j.pod, StatusSum: strings.Repeat("5", 64)}
			d, err := imageStep.Run(context.Background(), j.in, Observed{}, f)
			if n := strings.Join(j.r.Names(), ","); n != "gather,images" {
				t.Errorf("guest calls %s, want gather,images", n)
			}
			if got == nil {
				t.Fatal("no image helper call")
			}
			levTree := j.in.levTree()
			if got.LevDir != levTree || got.BenchDir != benchRef || got.Root != "/" ||
				filepath.Dir(levTree) != filepath.Dir(benchRef) || !strings.HasPrefix(filepath.Base(levTree), "lev-") || !strings.HasPrefix(filepath.Base(benchRef), "bench-") {
				t.Errorf("request %+v", *got)
			}
			for _, want := range []string{"/lever/wa", "/run/lever", "/run/lever-bench"} {
				if !contains(got.LevMounts, want) {
					t.Errorf("lev's tree lacks the mount point %s: %v", want, got.LevMounts)
				}
			}
			for _, want := range []string{"/lever", "/lever/wa", "/run/lever-bench"} {
				if !contains(got.BenchMounts, want) {
					t.Errorf("the workbench's tree lacks the mount point %s: %v", want, got.BenchMounts)
				}
			}
			if !strings.Contains(strings.Join(got.Paths, " "), "usr/bin/git") || len(got.Paths) != len(levimage.WorkbenchPackages)+2 {
				t.Errorf("planned paths %v", got.Paths)
			}
			if j.pod.writes != 0 {
				t.Errorf("%d image writes over the podman socket, want 0", j.pod.writes)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !d.Changed || d.Facts.BenchRef != benchRef || !strings.Contains(d.Detail, "lev's tree "+levTree+" made in the guest") ||
				!strings.Contains(d.Detail, "workbench "+benchRef+" made in the guest from 14 of its packages (42 entries: 30 files linked to the guest's own, 2 copied, 1 setuid/setgid bits or capabilities dropped") {
				t.Errorf("done %+v", d)
			}
			// the containers run the trees
			cs, err := j.in.Containers(d.Facts)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				want := levTree
				if c.Role == containers.Bench {
					want = benchRef
				}
				if c.Rootfs != want || c.Image != "" {
					t.Errorf("%s runs image %q rootfs %q, want the tree %s", c.Name, c.Image, c.Rootfs, want)
				}
			}
		})
	}
}

// TestImageStepSkipsWhatIsPresent: with lev's tree listed only the workbench is made
// (and the reverse); with both listed the step makes no guest call at all.
func TestImageStepSkipsWhatIsPresent(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lev, bench bool
		calls      string
	}{
		{"nothing present", false, false, "gather,images"},
		{"lev's tree present", true, false, "gather,images"},
		{"workbench present", false, true, "images"},
		{"both present", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, benchRef := builtJail(t)
			obs := Observed{Trees: map[string]bool{filepath.Base(benchRef): tc.bench, filepath.Base(j.in.levTree()): tc.lev}}
			var req imagebuild.Request
			j.r.On("gather", guesttest.Script("sec statussum state_digest"), guesttest.Sections(gatherReply))
			j.r.On("images", guesttest.Script(guestside.Command+"\x00"+guestside.ModeImages), func(c guest.Cmd) (guest.Result, error) {
				json.Unmarshal(c.Stdin, &req)
				resp := imagebuild.Response{}
				if req.LevDir != "" {
					resp.Lev = &imagebuild.LevTree{}
				}
				if req.BenchDir != "" {
					resp.Bench = &imagebuild.BenchTree{RootDirStats: levimage.RootDirStats{Entries: 1}}
				}
				b, _ := json.Marshal(resp)
				return guest.Result{Stdout: b}, nil
			})
			d, err := imageStep.Run(context.Background(), j.in, obs, Facts{UID: testUID, Podman: j.pod, StatusSum: strings.Repeat("5", 64)})
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Join(j.r.Names(), ","); n != tc.calls {
				t.Errorf("guest calls %q, want %q", n, tc.calls)
			}
			if (req.LevDir != "") == tc.lev || (req.BenchDir != "") == tc.bench && tc.calls != "" {
				t.Errorf("asked the guest for lev %q, workbench %q (present: lev %v, workbench %v)", req.LevDir, req.BenchDir, tc.lev, tc.bench)
			}
			if d.Changed != !(tc.lev && tc.bench) || d.Facts.BenchRef != benchRef {
				t.Errorf("done %+v", d)
			}
		})
	}
}
