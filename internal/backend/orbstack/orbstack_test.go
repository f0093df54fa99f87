package orbstack

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/guest"
)

const testTree = "/Users/dev/src/demo"

// TestScenarios replays every recorded exchange in testdata/scenarios through the real
// exec path against a fake orb that checks each argv exactly.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			x, s, done := fake(t, file, strings.NewReplacer("{tree}", testTree))
			tree := testTree
			if first(s.headers["tree"], "") == "none" {
				tree = ""
			}
			b, err := New(Options{Machine: "lever-demo", Tree: tree, Exec: x, Arch: "amd64"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			actions := s.headers["action"]
			if len(actions) == 0 {
				t.Fatalf("%s: no action", file)
			}
			var last error
			for i, a := range actions {
				last = act(t, ctx, b, x, s, a)
				if last != nil && i < len(actions)-1 {
					t.Fatalf("action %q: %v", a, last)
				}
			}
			want := strings.Join(s.headers["want-error"], "\n")
			got := ""
			if last != nil {
				got = last.Error()
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			done()
		})
	}
}

// act performs one scenario action; run actions check their result against the headers.
func act(t *testing.T, ctx context.Context, b *Backend, x HostExec, s *scenario, a string) error {
	t.Helper()
	verb, rest, _ := strings.Cut(a, " ")
	switch verb {
	case "ensure-up":
		return b.EnsureUp(ctx)
	case "warm-check":
		// What a warm apply/up does with a running machine: the host-side check, then the
		// in-guest check (in bring-up it rides in the egress snapshot's one root call).
		if err := b.CheckHost(ctx); err != nil {
			return err
		}
		sc := guest.NewScript(b.GuestCheck())
		res, err := guest.RunOK(ctx, b.Runner(), sc.Cmd(nil))
		if err != nil {
			return err
		}
		secs, err := sc.Parse(res.Stdout)
		if err != nil {
			return err
		}
		return b.CheckGuest(secs)
	case "guest-arch":
		arch, err := b.GuestArch(ctx)
		if err == nil && arch != first(s.headers["want-arch"], "") {
			t.Errorf("GuestArch = %q, want %q", arch, first(s.headers["want-arch"], ""))
		}
		return err
	case "stop":
		return b.Stop(ctx)
	case "destroy":
		return b.Destroy(ctx)
	case "run-root", "run-user":
		argv, err := splitWords(rest)
		if err != nil {
			t.Fatal(err)
		}
		c := guest.Cmd{Argv: argv, As: guest.Root}
		if verb == "run-user" {
			c.As = guest.RunUser
		}
		if in := s.headers["stdin"]; in != nil {
			c.Stdin = []byte(strings.Join(in, "\n") + "\n")
		}
		res, err := b.Runner().Run(ctx, c)
		if err != nil {
			return err
		}
		wantExit, _ := strconv.Atoi(first(s.headers["want-exit"], "0"))
		if res.ExitCode != wantExit {
			t.Errorf("exit %d, want %d", res.ExitCode, wantExit)
		}
		for h, got := range map[string][]byte{"want-stdout": res.Stdout, "want-stderr": res.Stderr} {
			if want, ok := s.headers[h]; ok {
				if diff := cmp.Diff(strings.Join(want, "\n")+"\n", string(got)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", h, diff)
				}
			}
		}
		return nil
	case "probe":
		goos := first(s.headers["goos"], "darwin")
		av := Probe(ctx, x, ProbeEnv{GOOS: goos, LookPath: func(string) (string, error) { return "/opt/orbstack/bin/orb", nil }})
		got := []string{strconv.FormatBool(av.Usable), av.Tool, av.Version, av.Reason}
		want := []string{first(s.headers["want-usable"], "false"), "/opt/orbstack/bin/orb", first(s.headers["want-version"], ""), first(s.headers["want-reason"], "")}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("availability [usable tool version reason] (-want +got):\n%s", diff)
		}
		return nil
	}
	t.Fatalf("unknown action %q", a)
	return nil
}

func first(v []string, def string) string {
	if len(v) == 0 {
		return def
	}
	return v[0]
}

// The argv lever gives orb for the jail's shape, spelled out: one mount, isolated.
func TestArgv(t *testing.T) {
	b, err := New(Options{Machine: "lever-demo", Tree: testTree, Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		got  []string
		want []string
	}{
		{"create", b.CreateArgv(), []string{"create", "--arch", "amd64", "--isolated", "--mount", testTree + ":/lever", "debian:bookworm", "lever-demo"}},
		{"root", b.Runner().(*Runner).Argv(guest.Cmd{Argv: []string{"iptables-save"}}), []string{"-u", "root", "-m", "lever-demo", "-w", "/", "iptables-save"}},
		{"run user", b.Runner().(*Runner).Argv(guest.Cmd{Argv: []string{"podman", "ps"}, As: guest.RunUser}), []string{"-u", "lever", "-m", "lever-demo", "-w", "/", "podman", "ps"}},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s argv (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"no machine", Options{Tree: testTree}, "orbstack backend: machine name is empty"},
		{"relative tree", Options{Machine: "lever-demo", Tree: "demo"}, `orbstack backend: tree "demo" is not an absolute host path`},
		// A ':' would split --mount host:guest elsewhere and mount a different directory.
		{"colon in tree", Options{Machine: "lever-demo", Tree: "/Users/dev/a:/etc"}, `orbstack backend: tree "/Users/dev/a:/etc" contains ':', which orb create --mount cannot express`},
		// lever has Linux helpers for these two only; a machine of another arch could not run them.
		{"other arch", Options{Machine: "lever-demo", Tree: testTree, Arch: "riscv64"}, `orbstack backend: architecture "riscv64": OrbStack machines are arm64 or amd64`},
	}
	for _, tc := range cases {
		_, err := New(tc.o)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A guest command must not be able to smuggle an orb flag (say -m another-machine).
func TestRunnerRefusesFlagCommand(t *testing.T) {
	r := &Runner{Machine: "lever-demo", RunUser: "lever", Exec: HostExec{Path: "/nonexistent"}}
	_, err := r.Run(context.Background(), guest.Cmd{Argv: []string{"-m", "other", "id"}})
	if err == nil || err.Error() != `orbstack runner: command "-m" starts with '-'` {
		t.Fatalf("err = %v", err)
	}
}

func TestRunnerUnreachable(t *testing.T) {
	r := &Runner{Machine: "lever-demo", RunUser: "lever", Exec: HostExec{Path: filepath.Join(t.TempDir(), "orb")}}
	_, err := r.Run(context.Background(), guest.Cmd{Argv: []string{"true"}})
	if err == nil || !strings.HasPrefix(err.Error(), "orbstack runner: running ") {
		t.Fatalf("err = %v", err)
	}
}

func TestCheckVersion(t *testing.T) {
	cases := []struct{ out, v, err string }{
		{"Version: 2.1.3 (2010300)\nCommit: 3c1d2e4\n", "2.1.3", ""},
		{"Version: 2.0.5 (2000500)\n", "2.0.5", "OrbStack 2.0.5 is not supported: lever accepts OrbStack >= 2.1.0, < 3.0.0 (isolated machines)"},
		{"Version: 3.0.0 (3000000)\n", "3.0.0", "OrbStack 3.0.0 is not supported: lever accepts OrbStack >= 2.1.0, < 3.0.0 (isolated machines)"},
		{"orb: command not found\n", "", `orb version: cannot read a version from "orb: command not found"`},
	}
	for _, tc := range cases {
		v, err := CheckVersion(tc.out)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if v != tc.v || got != tc.err {
			t.Errorf("CheckVersion(%q) = %q, %q; want %q, %q", tc.out, v, got, tc.v, tc.err)
		}
	}
}

func TestProbeNoOrb(t *testing.T) {
	for goos, want := range map[string]string{
		"darwin": "orb not found on PATH (install OrbStack)",
		"linux":  "OrbStack runs only on macOS (this host is linux); orb not found on PATH",
	} {
		av := Probe(context.Background(), HostExec{}, ProbeEnv{GOOS: goos, LookPath: func(string) (string, error) { return "", os.ErrNotExist }})
		if av.Usable || av.Reason != want {
			t.Errorf("%s: %+v, want reason %q", goos, av, want)
		}
	}
}

// ForwardSocket refuses, before any ssh runs, a forward ssh -L cannot express exactly or a
// host socket outside the instance's state dir; a well-formed one reaches ssh (here a
// missing OrbStack config, the positive control that the same call gets past the checks).
func TestForwardSocketRefuses(t *testing.T) {
	state := t.TempDir()
	b, err := New(Options{Machine: "lever-demo", Tree: testTree, StateDir: state, SSH: filepath.Join(t.TempDir(), "no-ssh"), SSHConfig: filepath.Join(t.TempDir(), "config")})
	if err != nil {
		t.Fatal(err)
	}
	guestSock := "/run/user/1000/podman/podman.sock"
	cases := []struct{ name, guest, host, want string }{
		{"relative host", guestSock, "podman.sock", "orbstack: forward podman.sock -> " + guestSock + ": both paths must be absolute"},
		{"outside the state dir", guestSock, "/tmp/podman.sock", "orbstack: forward /tmp/podman.sock: the host socket must be in the instance's state dir " + state},
		{"colon splits -L", "/run/user/1000/x:/etc/shadow", state + "/podman.sock", "orbstack: forward " + state + "/podman.sock -> /run/user/1000/x:/etc/shadow: a path with ':', space or newline cannot be expressed to ssh -L"},
		{"ssh token in the guest path", "/run/user/%u/podman/podman.sock", state + "/podman.sock", "orbstack: forward " + state + "/podman.sock -> /run/user/%u/podman/podman.sock (control " + state + "/orb-ssh.ctl): a path with '%' or '$' would be expanded by ssh"},
		{"well formed", guestSock, state + "/podman.sock", "OrbStack's ssh config: stat " + b.o.SSHConfig + ": no such file or directory (is OrbStack running?)"},
	}
	for _, tc := range cases {
		err := b.ForwardSocket(context.Background(), tc.guest, tc.host)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}
