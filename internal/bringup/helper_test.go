package bringup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/levimage/levtest"
)

// vmBackend is a backend whose guest is a VM of arch (the guest does not share the host's
// filesystem, so helpers travel on stdin).
type vmBackend struct {
	arch string
	r    guest.Runner
}

func (b vmBackend) Name() string                              { return "fakevm" }
func (b vmBackend) EnsureUp(context.Context) error            { return nil }
func (b vmBackend) Stop(context.Context) error                { return nil }
func (b vmBackend) Destroy(context.Context) error             { return nil }
func (b vmBackend) Runner() guest.Runner                      { return b.r }
func (b vmBackend) HostAlias() string                         { return "host.fake.internal" }
func (b vmBackend) Profile() backend.Profile                  { return backend.Profile{Name: "fakevm"} }
func (b vmBackend) GuestArch(context.Context) (string, error) { return b.arch, nil }

var _ backend.ArchReporter = vmBackend{}

// TestHelperIsLevForGuestArch: whatever lever itself is built for, the enrolment helper
// sent into a VM guest is the Linux lev for the guest's architecture (an arm64 guest gets
// lev-linux-arm64's bytes on stdin), never lever's own executable; a lev of the other
// architecture is refused before anything reaches the guest, naming its path and both
// architectures. The image lever builds is for the guest's architecture too.
func TestHelperIsLevForGuestArch(t *testing.T) {
	amd, arm := levtest.Binary(t, "linux", "amd64"), levtest.Binary(t, "linux", "arm64")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	selfBytes, _ := os.ReadFile(self)
	for _, tc := range []struct {
		name      string
		guestArch string
		lev       string // LEVER_LEV_BINARY
		image     string // lev.image (then New builds no image and the refusal comes at the helper)
		want      string // the lev whose bytes must travel; "" when refused
		refusal   []string
	}{
		{"arm64 guest gets lev-linux-arm64", "arm64", arm, "", arm, nil},
		{"amd64 guest gets lev-linux-amd64", "amd64", amd, "", amd, nil},
		{"arm64 guest with a configured image still gets lev-linux-arm64", "arm64", arm, "localhost/mine:1", arm, nil},
		{"arm64 guest, amd64 lev: New refuses", "arm64", amd, "", "", []string{amd, "built for linux/amd64", "the guest is linux/arm64"}},
		{"arm64 guest, amd64 lev, configured image: the helper refuses", "arm64", amd, "localhost/mine:1", "", []string{amd, "built for linux/amd64", "the guest is linux/arm64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "tree"), 0o755)
			key := filepath.Join(dir, "key")
			os.WriteFile(key, []byte("sk-x\n"), 0o600)
			yaml := "name: arch\nbackend: lima\ntree: tree\nbroker:\n  api_key_file: " + key + "\n"
			if tc.image != "" {
				yaml += "lev:\n  image: " + tc.image + "\n"
			}
			cfg, err := config.Parse(filepath.Join(dir, "lever.yaml"), []byte(yaml))
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
			t.Setenv(levimage.LevEnv, tc.lev)
			// a guest without lever's lev: the helper call asks for it, lever installs it
			// (its bytes on stdin) and runs it again
			r := (&guesttest.Runner{}).
				On("cached", guesttest.Script("no cached lev"), guesttest.Exit(113, "lever: no cached lev")).
				On("install", guesttest.Script("sha256sum -c"), guesttest.OK(""))
			in, err := Load(context.Background(), Options{Cfg: cfg, Backend: vmBackend{arch: tc.guestArch, r: r}, Exe: self})
			var argv []string
			var stdin []byte
			if err == nil {
				_, err = in.runHelper(context.Background(), guestside.ModeEnrol, []byte("{}"))
				if calls := r.Calls(); len(calls) > 0 {
					if err == nil || len(calls) != 3 || calls[1].Rule != "install" {
						t.Fatalf("calls %v (%v): want cached, install, cached", r.Names(), err)
					}
					argv, stdin, err = calls[2].Argv(), calls[1].Cmd.Stdin, nil
				}
			}
			if tc.want == "" {
				if err == nil {
					t.Fatalf("a %s guest was planned a helper from %s", tc.guestArch, tc.lev)
				}
				for _, w := range tc.refusal {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("refusal %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, _ := os.ReadFile(tc.want)
			if !bytes.Equal(stdin, want) {
				t.Fatalf("the helper payload is %d bytes, not %s's %d", len(stdin), tc.want, len(want))
			}
			if bytes.Equal(stdin, selfBytes) {
				t.Fatal("lever sent its own executable into the guest")
			}
			sum := sha256.Sum256(want)
			if got := strings.Join(argv, " "); !strings.HasPrefix(got, "/bin/sh -c ") || !strings.Contains(got, "/var/lib/lever/bin/lev-"+hex.EncodeToString(sum[:16])+";") ||
				!strings.HasSuffix(got, `exec "$f" __guest enrol`) || strings.Contains(got, self) {
				t.Fatalf("argv %q: want the installed lev started as `__guest enrol`", got)
			}
			if tc.image == "" {
				// lev's tree is named by the lev image lever computes for the guest
				if im, err := levimage.Build(levimage.Spec{LevBinary: tc.want, Arch: tc.guestArch}); err != nil || in.imageRef != im.Ref {
					t.Fatalf("the lev image ref %s is not the one for %s (%v)", in.imageRef, tc.guestArch, err)
				}
			}
		})
	}
	if runtime.GOARCH == "arm64" {
		t.Log("host is arm64: the amd64 rows are the cross-architecture ones")
	}
}

// TestHelperInstalledAfterEgress: in a VM guest, lever's lev is installed once the egress
// step is done, beside provisioning (whose answer here waits for the install: a gate only
// an install running beside it can open); a guest that was down is looked into first, and
// one that has the copy (a restart) gets no install; a guest whose containment check is
// refused gets no install; a guest whose observation lists the copy gets none either.
// Control: the same enrolment on a guest without it installs it first.
func TestHelperInstalledAfterEgress(t *testing.T) {
	vm := func(t *testing.T) *tjail {
		j := healthyJail(t)
		exe, _ := os.Executable()
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		j.in.InPlace = false
		j.in.helper = &guestside.Helper{Lev: exe, Digest: hex.EncodeToString(sum[:])}
		w := j.w
		// first: the install's stdin is lev (here the test binary), which holds strings
		// the fixture's rules match on
		j.r.OnFirst("install", func(c guest.Cmd) bool {
			return len(c.Argv) == 3 && c.Argv[0] == "/bin/sh" && strings.Contains(c.Argv[2], "sha256sum -c")
		}, func(guest.Cmd) (guest.Result, error) {
			w.mu.Lock()
			w.helperInstalled = true
			if w.provisionGate != nil {
				close(w.provisionGate)
				w.provisionGate = nil
			}
			w.mu.Unlock()
			return guest.Result{}, nil
		})
		j.r.OnFirst("look", func(c guest.Cmd) bool {
			return len(c.Argv) == 3 && c.Argv[0] == "/bin/sh" && strings.HasSuffix(c.Argv[2], "exit 0")
		}, func(guest.Cmd) (guest.Result, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if !w.helperInstalled {
				return guest.Result{ExitCode: 113, Stderr: []byte("lever: no cached lev")}, nil
			}
			return guest.Result{}, nil
		})
		j.r.OnFirst("enrol-installed", func(c guest.Cmd) bool {
			return len(c.Argv) == 3 && c.Argv[0] == "/bin/sh" && strings.HasSuffix(c.Argv[2], " "+guestside.Command+" "+guestside.ModeEnrol)
		}, func(guest.Cmd) (guest.Result, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if !w.helperInstalled {
				return guest.Result{ExitCode: 113, Stderr: []byte("lever: no cached lev")}, nil
			}
			w.enrolled, w.settingsOK = true, true
			return guest.Result{Stdout: []byte("enrolled u-manager\n")}, nil
		})
		return j
	}
	count := func(names []string, n string) (c int) {
		for _, x := range names {
			if x == n {
				c++
			}
		}
		return c
	}

	j := vm(t)
	j.cold()
	j.w.provisionGate = make(chan struct{})
	if _, err := j.in.Execute(context.Background()); err != nil {
		t.Fatalf("cold up: %v\n%s\ncalls %v", err, j.out, j.r.Names())
	}
	names := j.r.Names()
	if count(names, "install") != 1 || count(names, "enrol-installed") != 1 {
		t.Fatalf("cold up's guest calls %v: want one install and one enrolment run from it", names)
	}
	if i, e := slices.Index(names, "install"), slices.Index(names, "egress-apply"); i < e {
		t.Errorf("guest calls %v: the install came before the egress rebuild", names)
	}

	// a restart: the guest was down (no observation), but its disk has lev: one look, no
	// install
	j = vm(t)
	j.cold()
	j.w.helperInstalled = true
	if _, err := j.in.Execute(context.Background()); err != nil {
		t.Fatalf("restart: %v\n%s", err, j.out)
	}
	if names := j.r.Names(); count(names, "look") != 1 || count(names, "install") != 0 || count(names, "enrol-installed") != 1 {
		t.Errorf("restart's guest calls %v: want one look, no install", names)
	}

	// a backend whose call after the boot is the egress snapshot (Lima) looks in that
	// call: a fresh guest gets the install without a look, a restarted one neither
	for _, had := range []bool{false, true} {
		j = vm(t)
		j.cold()
		j.in.b = &snapBackend{fakeBackend: j.be}
		j.w.helperInstalled = had
		if _, err := j.in.Execute(context.Background()); err != nil {
			t.Fatalf("boot snapshot, lev there %v: %v\n%s", had, err, j.out)
		}
		wantInstall := 1
		if had {
			wantInstall = 0
		}
		if names := j.r.Names(); count(names, "look") != 0 || count(names, "install") != wantInstall || count(names, "enrol-installed") != 1 {
			t.Errorf("boot snapshot, lev there %v: guest calls %v, want no look and %d install", had, names, wantInstall)
		}
	}

	// containment refused: the bring-up stops at egress, and nothing is installed
	j = vm(t)
	j.cold()
	j.w.containment = "a stray mount"
	if _, err := j.in.Execute(context.Background()); err == nil || !strings.Contains(err.Error(), "not contained") {
		t.Fatalf("containment drift: err %v", err)
	}
	if n := count(j.r.Names(), "install"); n != 0 {
		t.Errorf("containment drift: %d installs (%v), want none", n, j.r.Names())
	}

	for _, present := range []bool{true, false} {
		j := vm(t)
		j.w.helperInstalled = present
		j.w.enrolled, j.w.settingsOK = false, false // the enrol step acts
		if _, err := j.in.Execute(context.Background()); err != nil {
			t.Fatalf("present=%v: %v\n%s", present, err, j.out)
		}
		want := 1
		if present {
			want = 0
		}
		if got := count(j.r.Names(), "install"); got != want {
			t.Errorf("present=%v: %d installs, want %d (%v)", present, got, want, j.r.Names())
		}
	}
}
