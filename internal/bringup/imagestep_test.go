package bringup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	in.helper = &guestside.Helper{Lev: lev, InPlace: in.InPlace}
	if in.levDigest, err = levimage.FileDigest(lev); err != nil {
		t.Fatal(err)
	}
	j.pod.images = map[string]bool{}
	return j, in.benchTree(levimage.WorkbenchRef(baseDebian, sum5, in.levDigest))
}

var (
	sum5 = strings.Repeat("5", 64) // the package-state digest the observation read
	sum6 = strings.Repeat("6", 64) // another: the guest's packages changed since
)

// helperBench is the image helper's answer for the workbench when the guest's digest is
// sum: the tree the request names for it (BenchRequest.Dir, as the helper names it).
func helperBench(req imagebuild.Request, sum string, st levimage.RootDirStats) *imagebuild.BenchTree {
	return &imagebuild.BenchTree{Dir: req.Bench.Dir(sum), Ref: levimage.WorkbenchRef(levimage.DebianBase, sum, req.Bench.LevDigest),
		StatusSum: sum, Packages: 14, RootDirStats: st}
}

// TestImageStepBuildsInGuest: lever's lev and the default workbench are trees made by
// ONE guest helper call (lev __guest images), never images loaded over the podman
// socket, and no other guest call reads the guest's packages: the request names lev's
// tree and, for the workbench, the trees dir, every mount destination of the containers
// that run it (a worker's dir among them) and the lev digest its name is made of; the
// workbench's ref and package-state digest are taken from the answer, and the step fails,
// naming the cause, when the helper fails, answers nonsense, leaves out a tree it was
// asked for, finds no dpkg database, or names a tree this host would not.
func TestImageStepBuildsInGuest(t *testing.T) {
	made := levimage.RootDirStats{Entries: 42, Linked: 30, Copied: 2, Stripped: 1}
	answer := func(resp imagebuild.Response) (guest.Result, error) {
		b, _ := json.Marshal(resp)
		return guest.Result{Stdout: b}, nil
	}
	exit := func(code int, stderr string) func(*tjail, imagebuild.Request) (guest.Result, error) {
		return func(*tjail, imagebuild.Request) (guest.Result, error) {
			return guesttest.Exit(code, stderr)(guest.Cmd{})
		}
	}
	ok := func(sum string) func(j *tjail, req imagebuild.Request) (guest.Result, error) {
		return func(j *tjail, req imagebuild.Request) (guest.Result, error) {
			return answer(imagebuild.Response{Lev: &imagebuild.LevTree{}, Bench: helperBench(req, sum, made)})
		}
	}
	cases := []struct {
		name     string
		observed string // the digest the observation read ("" after provisioning changed the guest)
		reply    func(j *tjail, req imagebuild.Request) (guest.Result, error)
		sum      string // the digest the workbench's tree is then named by
		want     string // "" = success
	}{
		{"success", sum5, ok(sum5), sum5, ""},
		{"success, no digest observed", "", ok(sum5), sum5, ""},
		{"the packages changed since the observation", sum5, ok(sum6), sum6, ""},
		{"helper fails", sum5, exit(1, "making the workbench tree: input/output error"), "", "exited 1: making the workbench tree: input/output error"},
		{"a workbench package is missing", sum5, exit(1, "Error: planning the workbench: package git is not installed in the guest"), "",
			"exited 1: Error: planning the workbench: package git is not installed in the guest"},
		{"guest unreachable", sum5, func(*tjail, imagebuild.Request) (guest.Result, error) {
			return guest.Result{}, errors.New("ssh: connection reset")
		}, "", "connection reset"},
		{"answer is not the helper's", sum5, func(*tjail, imagebuild.Request) (guest.Result, error) {
			return guest.Result{Stdout: []byte("Welcome to Debian\n")}, nil
		}, "", "reading the guest's image helper"},
		{"no word of lev's tree", sum5, func(_ *tjail, req imagebuild.Request) (guest.Result, error) {
			return answer(imagebuild.Response{Bench: helperBench(req, sum5, made)})
		}, "", "did not make lev's tree"},
		{"no word of the workbench", sum5, func(*tjail, imagebuild.Request) (guest.Result, error) {
			return answer(imagebuild.Response{Lev: &imagebuild.LevTree{}})
		}, "", "did not make the workbench's tree"},
		{"no dpkg database", "", func(*tjail, imagebuild.Request) (guest.Result, error) {
			return answer(imagebuild.Response{Lev: &imagebuild.LevTree{}, Bench: &imagebuild.BenchTree{NoDpkg: "no /var/lib/dpkg/status: not a Debian-family guest"}})
		}, "", "workbench: the guest has no dpkg database (no /var/lib/dpkg/status: not a Debian-family guest), so lever cannot make the workbench from its packages: set lev.base_image or lev.base_tarball in "},
		{"no digest in the answer", sum5, func(_ *tjail, req imagebuild.Request) (guest.Result, error) {
			b := helperBench(req, sum5, made)
			b.StatusSum = ""
			return answer(imagebuild.Response{Lev: &imagebuild.LevTree{}, Bench: b})
		}, "", "gave no package-state digest"},
		{"a tree this host would not name", sum5, func(_ *tjail, req imagebuild.Request) (guest.Result, error) {
			b := helperBench(req, sum5, made)
			b.Dir = filepath.Join(req.Bench.Trees, "bench-elsewhere")
			return answer(imagebuild.Response{Lev: &imagebuild.LevTree{}, Bench: b})
		}, "", "but its package-state digest names"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, _ := builtJail(t)
			var got *imagebuild.Request
			j.r.On("images", guesttest.Script(guestside.Command+"\x00"+guestside.ModeImages), func(c guest.Cmd) (guest.Result, error) {
				var req imagebuild.Request
				dec := json.NewDecoder(bytes.NewReader(c.Stdin))
				dec.DisallowUnknownFields() // as the helper reads it
				if err := dec.Decode(&req); err != nil {
					t.Fatalf("the helper's request is not what it reads: %v", err)
				}
				if c.As != guest.Root {
					t.Errorf("the image helper runs as %v, want root (it reads the package files)", c.As)
				}
				got = &req
				return tc.reply(j, req)
			})
			f := Facts{UID: testUID, Podman: j.pod, StatusSum: tc.observed}
			d, err := imageStep.Run(context.Background(), j.in, Observed{}, f)
			if n := strings.Join(j.r.Names(), ","); n != "images" {
				t.Errorf("guest calls %s, want images (one helper call, no package read of its own)", n)
			}
			if got == nil || got.Bench == nil {
				t.Fatalf("no image helper call for the workbench: %+v", got)
			}
			levTree := j.in.levTree()
			wantBench := j.in.benchTree(levimage.WorkbenchRef(baseDebian, tc.sum, j.in.levDigest))
			if got.LevDir != levTree || got.Bench.Trees != filepath.Dir(levTree) || got.Bench.LevDigest != j.in.levDigest ||
				!strings.HasPrefix(filepath.Base(levTree), "lev-") {
				t.Errorf("request %+v %+v", *got, *got.Bench)
			}
			// the helper names the tree from the digest it reads as this host names it
			// from the digest its observation read
			if got.Bench.Dir(sum5) != j.in.benchTree(levimage.WorkbenchRef(baseDebian, sum5, j.in.levDigest)) {
				t.Errorf("the helper would name the workbench %s, this host %s", got.Bench.Dir(sum5), j.in.benchTree(levimage.WorkbenchRef(baseDebian, sum5, j.in.levDigest)))
			}
			for _, want := range []string{"/lever/wa", "/run/lever", "/run/lever-bench"} {
				if !contains(got.LevMounts, want) {
					t.Errorf("lev's tree lacks the mount point %s: %v", want, got.LevMounts)
				}
			}
			for _, want := range []string{"/lever", "/lever/wa", "/run/lever-bench"} {
				if !contains(got.Bench.Mounts, want) {
					t.Errorf("the workbench's tree lacks the mount point %s: %v", want, got.Bench.Mounts)
				}
			}
			if j.pod.writes != 0 {
				t.Errorf("%d image writes over the podman socket, want 0", j.pod.writes)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				if strings.Contains(tc.want, "set lev.base_image") && !strings.HasSuffix(err.Error(), " in "+j.in.cfg.Path) {
					t.Errorf("the advice does not name the config file %s: %v", j.in.cfg.Path, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !d.Changed || d.Facts.BenchRef != wantBench || d.Facts.StatusSum != tc.sum || !strings.Contains(d.Detail, "lev's tree "+levTree+" made in the guest") ||
				!strings.Contains(d.Detail, "workbench "+wantBench+" made in the guest from 14 of its packages (42 entries: 30 files linked to the guest's own, 2 copied, 1 setuid/setgid bits or capabilities dropped") {
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
					want = wantBench
				}
				if c.Rootfs != want || c.Image != "" {
					t.Errorf("%s runs image %q rootfs %q, want the tree %s", c.Name, c.Image, c.Rootfs, want)
				}
			}
		})
	}
}

// TestImageStepSkipsWhatIsPresent: with lev's tree listed only the workbench is asked
// for (and the reverse); with both listed the step makes no guest call at all. Without
// an observed digest (provisioning changed the guest) the helper is asked and finds the
// workbench's tree whole, and the step reports no change; so does a guest restarted after
// lever stop, whose observation (made while it was down) listed neither tree, and whose
// disk kept both.
func TestImageStepSkipsWhatIsPresent(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lev, bench bool // listed by the observation
		kept       bool // there whole all the same (a restart: the guest was down when observed)
		observed   string
		calls      string
		detail     string
	}{
		{"nothing present", false, false, false, sum5, "images", "made in the guest from 14"},
		{"lev's tree present", true, false, false, sum5, "images", "made in the guest from 14"},
		{"workbench present", false, true, false, sum5, "images", " made in the guest ("},
		{"both present", true, true, false, sum5, "", " present"},
		{"both present, digest not observed", true, true, false, "", "images", " present"},
		{"restarted: both kept, neither observed", false, false, true, "", "images", "present; workbench"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, benchRef := builtJail(t)
			obs := Observed{Trees: map[string]bool{filepath.Base(benchRef): tc.bench, filepath.Base(j.in.levTree()): tc.lev}}
			var req imagebuild.Request
			j.r.On("images", guesttest.Script(guestside.Command+"\x00"+guestside.ModeImages), func(c guest.Cmd) (guest.Result, error) {
				json.Unmarshal(c.Stdin, &req)
				resp := imagebuild.Response{}
				if req.LevDir != "" {
					resp.Lev = &imagebuild.LevTree{Found: tc.kept}
				}
				if req.Bench != nil {
					st := levimage.RootDirStats{Entries: 1}
					if tc.bench || tc.kept { // found whole
						st.Entries = 0
					}
					resp.Bench = helperBench(req, sum5, st)
				}
				b, _ := json.Marshal(resp)
				return guest.Result{Stdout: b}, nil
			})
			d, err := imageStep.Run(context.Background(), j.in, obs, Facts{UID: testUID, Podman: j.pod, StatusSum: tc.observed})
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Join(j.r.Names(), ","); n != tc.calls {
				t.Errorf("guest calls %q, want %q", n, tc.calls)
			}
			askedBench := tc.observed == "" || !tc.bench
			if (req.LevDir != "") == tc.lev || (req.Bench != nil) != askedBench && tc.calls != "" {
				t.Errorf("asked the guest for lev %q, workbench %+v (present: lev %v, workbench %v)", req.LevDir, req.Bench, tc.lev, tc.bench)
			}
			// changed only when a tree was made: one the helper found whole is no change
			if d.Changed != !(tc.lev && tc.bench || tc.kept) || d.Facts.BenchRef != benchRef || d.Facts.StatusSum != sum5 ||
				!strings.Contains(d.Detail, "workbench "+benchRef) || !strings.Contains(d.Detail, tc.detail) {
				t.Errorf("done %+v", d)
			}
		})
	}
}
