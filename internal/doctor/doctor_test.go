package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)

// fake is a host as the tests describe it; the zero value of each field is a healthy
// Linux host with no lever.yaml.
type fake struct {
	goos      string
	backends  []Backend
	tools     map[string]Tool
	kvm       KVM
	free      uint64
	freeErr   error
	freeAt    *string
	cfg       Config
	ca        Cert
	broker    Broker
	jail      *Jail
	ns        []Namespace
	nsErr     error
	leftovers []Process
}

func (f *fake) Host() (string, string) {
	if f.goos == "" {
		return "linux", "amd64"
	}
	return f.goos, "arm64"
}
func (f *fake) Backends(context.Context) []Backend { return f.backends }
func (f *fake) Tool(_ context.Context, n string) Tool {
	if t, ok := f.tools[n]; ok {
		return t
	}
	return Tool{Path: "/usr/bin/" + n, Version: n + " 1.0"}
}
func (f *fake) KVM() KVM { return f.kvm }
func (f *fake) FreeBytes(p string) (uint64, error) {
	if f.freeAt != nil {
		*f.freeAt = p
	}
	return f.free, f.freeErr
}
func (f *fake) Config() Config                   { return f.cfg }
func (f *fake) CA(string) Cert                   { return f.ca }
func (f *fake) Broker(string) Broker             { return f.broker }
func (f *fake) Jail(context.Context) *Jail       { return f.jail }
func (f *fake) Namespaces() ([]Namespace, error) { return f.ns, f.nsErr }
func (f *fake) Leftovers() ([]Process, error)    { return f.leftovers, nil }
func (f *fake) Now() time.Time                   { return now }

func healthy() *fake {
	return &fake{
		backends: []Backend{{Name: "lima", Usable: true, Tool: "limactl", Version: "1.2.2", Accelerator: "kvm"}, {Name: "netns", Reason: "development substrate"}, {Name: "orbstack", Reason: "macOS only"}},
		kvm:      KVM{Present: true, User: "ann"},
		free:     50 << 30,
		cfg:      Config{Path: "lever.yaml", Found: true, Name: "demo", Backend: "lima", StateDir: "/state/demo"},
		ca:       Cert{Path: "/state/demo/ca/ca.crt", NotAfter: now.AddDate(9, 0, 0)},
		broker:   Broker{Running: true, CertNotAfter: now.Add(10 * time.Hour)},
		jail:     &Jail{Reachable: true, Verified: true, Healthy: true},
		ns:       []Namespace{{Name: "lever-demo", Procs: 4}},
	}
}

func find(r Report, id string) Check {
	for _, c := range r.Checks {
		if c.ID == id {
			return c
		}
	}
	return Check{ID: id, Status: "absent"}
}

// TestChecks: each row changes one fact of a healthy host and names the check that must
// turn, its verdict, words its detail and fix must carry, and the exit the report gives
// (blockers > 0: lever doctor exits 1). The first row is the control: nothing to report.
func TestChecks(t *testing.T) {
	cases := []struct {
		name     string
		mod      func(*fake)
		id       string
		status   Status
		detail   string
		fix      string
		blockers int
	}{
		{"control: a healthy host", func(*fake) {}, "jail", OK, "runs, firewall verified", "", 0},
		{"selected backend unusable", func(f *fake) { f.backends[0] = Backend{Name: "lima", Reason: "limactl not found on PATH"} }, "backend lima", Blocker, "lever.yaml names it: limactl not found", "build-limactl.sh", 2},
		{"another backend unusable is a warning", func(f *fake) {}, "backend netns", Warn, "development substrate", "LEVER_DEV_NETNS=1", 0},
		{"no backend at all", func(f *fake) {
			f.cfg = Config{Path: "lever.yaml"}
			f.backends = []Backend{{Name: "lima", Reason: "x"}, {Name: "orbstack", Reason: "y"}}
		}, "backends", Blocker, "no backend is usable", "lever backends", 1},
		{"no /dev/kvm", func(f *fake) { f.kvm = KVM{User: "ann"} }, "kvm", Warn, "does not exist", "kvm_intel", 0},
		{"kvm not accessible to the VM's owner", func(f *fake) { f.kvm = KVM{Present: true, OpenErr: "permission denied", User: "ann"} }, "kvm", Warn, "ann cannot open /dev/kvm (permission denied)", "usermod -aG kvm ann", 0},
		{"kvm not needed off lima", func(f *fake) { f.kvm = KVM{User: "ann"}; f.cfg.Backend = "netns"; f.backends[1].Usable = true }, "kvm", Warn, "only the lima backend needs it", "", 0},
		{"qemu missing with lima", func(f *fake) { f.tools = map[string]Tool{"qemu-system-x86_64": {}} }, "qemu", Blocker, "not on PATH", "apt-get install qemu-system-x86", 1},
		{"qemu missing without a config", func(f *fake) { f.tools = map[string]Tool{"qemu-system-x86_64": {}}; f.cfg = Config{Path: "lever.yaml"} }, "qemu", Warn, "not on PATH", "qemu", 0},
		{"podman missing with netns", func(f *fake) {
			f.tools = map[string]Tool{"podman": {}}
			f.cfg.Backend = "netns"
			f.backends[1].Usable = true
		}, "podman", Blocker, "podman is not on PATH", "apt-get install podman", 1},
		{"podman missing with lima", func(f *fake) { f.tools = map[string]Tool{"podman": {}} }, "podman", Warn, "netns backend", "", 0},
		{"shellcheck missing", func(f *fake) { f.tools = map[string]Tool{"shellcheck": {}} }, "shellcheck", Warn, "make lint skips the shell scripts", "apt-get install shellcheck", 0},
		{"disk nearly full", func(f *fake) { f.free = 1 << 30 }, "disk", Blocker, "1.0 GiB free at /state/demo", "lever destroy", 1},
		{"disk low", func(f *fake) { f.free = 5 << 30 }, "disk", Warn, "5.0 GiB free", "free space", 0},
		{"disk unreadable", func(f *fake) { f.freeErr = errors.New("no such file") }, "disk", Warn, "no such file", "", 0},
		{"config broken", func(f *fake) { f.cfg.Err = "lever.yaml: unknown field \"bakend\"" }, "config", Blocker, "unknown field", "docs/config.md", 1},
		{"no config: the jail's checks are skipped", func(f *fake) { f.cfg = Config{Path: "lever.yaml"} }, "jail", "absent", "", "", 0},
		{"CA expired", func(f *fake) { f.ca.NotAfter = now.Add(-time.Hour) }, "broker ca", Blocker, "expired 2026-12-05T07:00:00Z", "lever destroy and lever up", 1},
		{"CA expires soon", func(f *fake) { f.ca.NotAfter = now.Add(72 * time.Hour) }, "broker ca", Warn, "expires 2026-12-08", "", 0},
		{"CA not made yet", func(f *fake) { f.ca = Cert{Missing: true} }, "broker ca", OK, "lever up makes it", "", 0},
		{"CA unreadable", func(f *fake) { f.ca = Cert{Path: "/s/ca.crt", Err: "/s/ca.crt: no PEM certificate in it"} }, "broker ca", Blocker, "no PEM", "restore /s/ca.crt", 1},
		{"server certificate expired", func(f *fake) { f.broker.CertNotAfter = now.Add(-time.Minute) }, "broker certificate", Blocker, "expired", "lever broker stop, then lever up", 1},
		{"broker not running", func(f *fake) { f.broker = Broker{} }, "broker certificate", OK, "not running", "", 0},
		{"jail drifted", func(f *fake) {
			f.jail.Verified = false
			f.jail.Differences = []string{"missing: -A LEVER_EGRESS -j DROP"}
		}, "jail", Blocker, "DRIFTED from lever.yaml: missing: -A LEVER_EGRESS -j DROP", "lever up", 1},
		{"jail firewall unreadable", func(f *fake) { f.jail.EgressErr = "iptables-save: exit 1" }, "jail", Warn, "iptables-save", "lever status", 0},
		{"jail unhealthy", func(f *fake) { f.jail.Healthy = false }, "jail", Warn, "not healthy", "lever status", 0},
		{"jail not running", func(f *fake) { f.jail = &Jail{} }, "jail", OK, "not running", "", 0},
		{"jail not observable", func(f *fake) { f.jail = &Jail{Err: "no lev binary for a linux/amd64 guest"} }, "jail", Warn, "cannot observe jail demo: no lev binary", "lever status", 0},
		{"leftover namespace", func(f *fake) { f.ns = append(f.ns, Namespace{Name: "lever-old", Procs: 0}) }, "leftover namespaces", Warn, "lever-old", "ip netns delete", 0},
		{"namespaces, not root", func(f *fake) { f.ns = []Namespace{{Name: "lever-x", Procs: -1}} }, "leftover namespaces", OK, "needs root", "", 0},
		{"namespaces unreadable", func(f *fake) { f.nsErr = errors.New("permission denied") }, "leftover namespaces", Warn, "permission denied", "as root", 0},
		{"leftover conmon", func(f *fake) {
			f.leftovers = []Process{{PID: 42, User: "lever", What: "conmon of a finished exec session"}}
		}, "leftover processes", Warn, "42 (lever, conmon", "exit_command_delay = 10", 0},
		{"macOS: no Linux-only checks", func(f *fake) { f.goos = "darwin"; f.kvm = KVM{} }, "kvm", "absent", "", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			tc.mod(f)
			r := Run(context.Background(), f)
			c := find(r, tc.id)
			if c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) || !strings.Contains(c.Fix, tc.fix) {
				t.Errorf("%s: %+v, want %s with detail ~%q fix ~%q", tc.id, c, tc.status, tc.detail, tc.fix)
			}
			if c.Status != OK && c.Status != "absent" && c.Fix == "" {
				t.Errorf("%s is %s but names no fix", c.ID, c.Status)
			}
			if r.Blockers != tc.blockers {
				t.Errorf("%d blockers, want %d:\n%s", r.Blockers, tc.blockers, r.Text())
			}
			if r.Schema != 1 {
				t.Errorf("schema %d", r.Schema)
			}
		})
	}
}

// TestReportFormats: the JSON carries schema 1 and every check's fields; the text has one
// line per check, each fix under its check, and the summary.
func TestReportFormats(t *testing.T) {
	f := healthy()
	f.tools = map[string]Tool{"shellcheck": {}}
	f.ca.NotAfter = now.Add(-time.Hour)
	var at string
	f.freeAt = &at
	r := Run(context.Background(), f)
	if at != "/state/demo" {
		t.Errorf("free space read at %q, want the jail's state dir", at)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	json.Unmarshal(b, &back)
	if back["schema"] != float64(1) || back["blockers"] != float64(1) || back["warnings"] != float64(3) {
		t.Errorf("json head: schema %v blockers %v warnings %v\n%s", back["schema"], back["blockers"], back["warnings"], b)
	}
	txt := r.Text()
	for _, want := range []string{
		"WARN     shellcheck: shellcheck is not on PATH",
		"         fix: apt-get install shellcheck",
		"BLOCKER  broker ca: /state/demo/ca/ca.crt expired",
		"ok       jail: jail demo runs, firewall verified rule for rule\n",
		"lever doctor: 1 blocker, 3 warnings\n",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("text lacks %q:\n%s", want, txt)
		}
	}
	if n := strings.Count(txt, "\n"); n != len(r.Checks)+r.Blockers+r.Warnings+1 {
		t.Errorf("%d lines for %d checks:\n%s", n, len(r.Checks), txt)
	}
}
