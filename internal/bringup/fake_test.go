package bringup

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/levimage"
)

// The unit-test jail: a scripted guest (guesttest.Runner) whose answers come from a
// world the test sets, a fake backend (with a containment check), a fake podman and a
// fake broker. Every step runs its real code against them.

const (
	testAlias   = "10.0.0.1"
	testBoot    = "boot-1"
	testUID     = 1001
	testBaseRef = "localhost/base:1"
)

// world is the fake guest's state; the runner's answers read it and the step's commands
// change it.
type world struct {
	mu            sync.Mutex
	down          bool // the guest is not running (EnsureUp starts it)
	stampCurrent  bool
	userExists    bool
	serviceUp     bool
	enrolled      bool
	settingsOK    bool
	egressOK      bool
	containment   string // what the in-guest containment check prints ("contained")
	fail          string // the rule that answers with a failure
	certPEM       string
	settingsHash  string
	provisionHash string
	// enrolGate, when set, holds the enrol helper's answer until it is closed (or fails
	// it after 2 s); enrolled is closed once an enrol call has answered.
	enrolGate, enrolDone chan struct{}
	// provisionGate, when set, holds provisioning's answer until it is closed (or fails it
	// after 2 s); helperInstalled: lever's lev is installed in the guest (a VM's).
	provisionGate   chan struct{}
	helperInstalled bool
	// mountsAnswer, when set, is the observation's proof of the running containers'
	// mounts and channels (mountcheck.LiveResponse); otherwise all proven.
	mountsAnswer string
}

// waitGate waits for gate (nil: no wait), failing after 2 s with what did not run beside.
func waitGate(gate chan struct{}, what string) error {
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-time.After(2 * time.Second):
		return errors.New("gate: nothing ran beside " + what)
	}
}

type fakeBackend struct {
	w        *world
	r        guest.Runner
	hostErr  error
	ensureUp int
	hostChk  int
}

func (b *fakeBackend) Name() string { return "fake" }
func (b *fakeBackend) EnsureUp(context.Context) error {
	b.ensureUp++
	if b.w.fail == "ensureup" {
		return errors.New("the hypervisor refused")
	}
	b.w.mu.Lock()
	b.w.down = false
	b.w.mu.Unlock()
	return nil
}
func (b *fakeBackend) Stop(context.Context) error    { return nil }
func (b *fakeBackend) Destroy(context.Context) error { return nil }
func (b *fakeBackend) Runner() guest.Runner          { return b.r }
func (b *fakeBackend) HostAlias() string             { return "host.fake.internal" }
func (b *fakeBackend) Profile() backend.Profile      { return backend.Profile{Name: "fake"} }

// backend.Containment: host side counted, guest side a fragment judged by its output.
func (b *fakeBackend) CheckHost(context.Context) error { b.hostChk++; return b.hostErr }
func (b *fakeBackend) GuestCheck() string              { return "put containment.fake contained" }
func (b *fakeBackend) CheckGuest(secs guest.Sections) error {
	if out, err := secs.OK("containment.fake"); err != nil || strings.TrimSpace(out) != "contained" {
		return fmt.Errorf("fake guest not contained: %q (%v)", out, err)
	}
	return nil
}

// netns-like: the guest shares the host filesystem (the enrol helper runs in place).
func (b *fakeBackend) SharesHostFilesystem() bool { return true }

// snapBackend is the fake with UpSnapshotter (Lima's shape): its EnsureUp ends with the
// egress snapshot req asks for, run through the guest runner like any snapshot.
type snapBackend struct {
	*fakeBackend
	snaps int
}

func (b *snapBackend) EnsureUpWithSnapshot(ctx context.Context, req guest.SnapshotRequest) (guest.Sections, error) {
	if err := b.EnsureUp(ctx); err != nil {
		return nil, err
	}
	b.snaps++
	sc := guest.NewScript(guest.SnapshotParts(req)...)
	res, err := guest.RunOK(ctx, b.r, sc.Cmd(guest.SnapshotEnv(req)))
	if err != nil {
		return nil, err
	}
	return sc.Parse(res.Stdout)
}

var (
	_ UpSnapshotter       = (*snapBackend)(nil)
	_ backend.Containment = (*fakeBackend)(nil)
	_ HostSharer          = (*fakeBackend)(nil)
	_ Podman              = (*fakePodman)(nil)
	_ BrokerControl       = (*fakeBroker)(nil)
)

type fakePodman struct {
	mu         sync.Mutex
	images     map[string]bool
	containers map[string]containers.State
	writes     int
	fail       string // the method that fails
	dials      int
	// layered, when set, is closed at the first LayerLev (the workbench being built)
	layered chan struct{}
	// dialGate, when set, holds Dial until it is closed (or fails it after 2 s)
	dialGate chan struct{}
	// together, when set, makes each EnsureContainer that acts wait (up to 0.2 s) until
	// together of them are in flight at once; overlapped says they ever were
	together   int
	inFlight   int
	allArrived chan struct{}
	overlapped bool
}

func (p *fakePodman) Dial(_ context.Context, uid int) (Podman, error) {
	if err := waitGate(p.dialGate, "the podman connection"); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dials++
	if p.fail == "dial" || uid != testUID {
		return nil, fmt.Errorf("no podman for uid %d", uid)
	}
	return p, nil
}

func (p *fakePodman) ImageExists(ref string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.images[ref], nil
}

func (p *fakePodman) Image(ref string) (*containers.ImageInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.images[ref] {
		return nil, fmt.Errorf("no image %s", ref)
	}
	return &containers.ImageInfo{ID: "id-" + ref, Size: 1 << 20}, nil
}

func (p *fakePodman) LoadArchive([]byte) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail == "load" {
		return nil, errors.New("podman load: no space left")
	}
	p.writes++
	p.images["localhost/lever/lev:test"] = true
	return []string{"localhost/lever/lev:test"}, nil
}

func (p *fakePodman) LayerLev(_, ref, _ string, _, _ []string, _ map[string]string, _ io.Writer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail == "layer" {
		return errors.New("podman build: boom")
	}
	p.writes++
	p.images[ref] = true
	if p.layered != nil {
		close(p.layered)
		p.layered = nil
	}
	return nil
}

func (p *fakePodman) List(string) ([]containers.State, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []containers.State
	for _, s := range p.containers {
		out = append(out, s)
	}
	return out, nil
}

// fakeContainerPid is the pid the fake reports for a container it has set up.
const fakeContainerPid = 4242

func (p *fakePodman) EnsureContainer(ct containers.Container, _ bool, h containers.StartHooks) (containers.Change, error) {
	p.mu.Lock()
	st, ok := p.containers[ct.Name]
	p.mu.Unlock()
	change := containers.Created
	if ok && st.Running {
		if h.Restart == nil || !h.Restart(ct) {
			return containers.Unchanged, nil
		}
		change = containers.Restarted
	}
	p.mu.Lock()
	if p.together > 0 {
		if p.allArrived == nil {
			p.allArrived = make(chan struct{})
		}
		p.inFlight++
		if p.inFlight == p.together && !p.overlapped {
			close(p.allArrived)
			p.overlapped = true
		}
		all := p.allArrived
		p.mu.Unlock()
		select {
		case <-all:
		case <-time.After(200 * time.Millisecond):
		}
		defer func() {
			p.mu.Lock()
			p.inFlight--
			p.mu.Unlock()
		}()
	} else {
		p.mu.Unlock()
	}
	if h.Before != nil {
		if err := h.Before(ct); err != nil {
			return "", fmt.Errorf("not starting container %s: %w", ct.Name, err)
		}
	}
	if h.Mounted != nil {
		if err := h.Mounted(ct, fakeContainerPid); err != nil {
			return "", fmt.Errorf("not starting container %s (removed before anything in it ran): %w", ct.Name, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail == "ensure" {
		return "", errors.New("podman create: boom")
	}
	p.containers[ct.Name] = containers.State{Name: ct.Name, Running: p.fail != "exits", Status: "exited", ExitCode: 1}
	return change, nil
}

func (p *fakePodman) Inspect(name string) (*containers.State, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.containers[name]
	if !ok {
		return nil, nil
	}
	return &st, nil
}

func (p *fakePodman) Logs(string) (string, error) { return "lev: bad config", nil }

type fakeBroker struct {
	// gate, when set, holds Start until it is closed (or fails it after 2 s)
	gate    chan struct{}
	running bool
	sans    []string
	starts  int
	stops   int
	fail    bool
}

func (b *fakeBroker) Status() (*brokerctl.BrokerStatus, error) {
	if !b.running {
		return &brokerctl.BrokerStatus{}, nil
	}
	return &brokerctl.BrokerStatus{Running: true, PID: 4242, State: &brokerctl.State{SANIPs: b.sans, Listen: testAlias + ":7443", ServerCertNotAfter: time.Now().Add(24 * time.Hour)}}, nil
}

func (b *fakeBroker) Start(_ context.Context, ips string) (*brokerctl.BrokerStatus, error) {
	b.starts++
	if err := waitGate(b.gate, "the broker's start"); err != nil {
		return nil, err
	}
	if b.fail {
		return nil, errors.New("port 7443 in use")
	}
	b.running, b.sans = true, strings.Split(ips, ",")
	return b.Status()
}

func (b *fakeBroker) Stop(context.Context) error { b.stops++; b.running = false; return nil }

// tjail is one unit-test jail.
type tjail struct {
	in     *Instance
	w      *world
	r      *guesttest.Runner
	be     *fakeBackend
	pod    *fakePodman
	broker *fakeBroker
	out    *strings.Builder
}

// healthyJail is a jail that is up and current in every respect: a warm up changes
// nothing. Tests break one thing each.
func healthyJail(t *testing.T) *tjail {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "wa"), 0o755)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Name: "u", Path: filepath.Join(dir, "lever.yaml"), Dir: dir, TreePath: tree, Backend: "fake", Egress: "closed",
		Workers: []config.Worker{{Name: "a", Dir: "wa"}},
		Broker:  config.Broker{JailPort: 7443},
		Lev:     config.Lev{Image: "localhost/lever/lev:test", BaseImage: testBaseRef},
	}
	w := &world{stampCurrent: true, userExists: true, serviceUp: true, enrolled: true, settingsOK: true, egressOK: true, containment: "contained"}
	r := &guesttest.Runner{}
	be := &fakeBackend{w: w, r: r}
	pod := &fakePodman{images: map[string]bool{"localhost/lever/lev:test": true, testBaseRef: true}, containers: map[string]containers.State{}}
	br := &fakeBroker{running: true, sans: []string{testAlias}}
	out := &strings.Builder{}
	in, err := Load(context.Background(), Options{Cfg: cfg, Backend: be, Exe: exe, LevBinary: exe, Out: out, Podman: pod, Broker: br})
	if err != nil {
		t.Fatal(err)
	}
	// The test binary stands in for lev; under -race it is not static, which only the
	// workbench's digest needs: fix it.
	in.levBin, in.levDigest, in.levErr = exe, "sha256:"+strings.Repeat("1", 64), nil
	in.helper = &guestside.Helper{Lev: exe, InPlace: in.InPlace}
	w.settingsHash, w.provisionHash = in.settingsHash, in.provP.Hash()
	w.certPEM = testCA(t, cfg.StateDir())
	// the workbench and every planned container are present and running
	bench := levimage.WorkbenchRef(baseImage, "id-"+testBaseRef, in.levDigest)
	pod.images[bench] = true
	cs, err := in.Containers(Facts{UID: testUID, AliasV4: testAlias, BenchRef: bench})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		pod.containers[c.Name] = containers.State{Name: c.Name, Running: true}
	}
	j := &tjail{in: in, w: w, r: r, be: be, pod: pod, broker: br, out: out}
	j.script()
	return j
}

// script installs the guest's answers: each rule reads the world, and the commands that
// change the guest change it.
func (j *tjail) script() {
	w := j.w
	failing := func(name string, reply guesttest.Reply) guesttest.Reply {
		return func(c guest.Cmd) (guest.Result, error) {
			w.mu.Lock()
			f, down := w.fail, w.down
			w.mu.Unlock()
			if down {
				return guest.Result{}, errors.New("fake guest is not running")
			}
			if f == name {
				return guest.Result{ExitCode: 1, Stderr: []byte(name + " failed in the fake guest")}, nil
			}
			return reply(c)
		}
	}
	snapshot := func(c guest.Cmd) []guesttest.Sec {
		w.mu.Lock()
		defer w.mu.Unlock()
		spec := j.in.Spec
		rs, _ := egress.Render(egress.Inputs{Posture: spec.Posture, Ports: spec.Ports, AliasV4: netip.MustParseAddr(testAlias)})
		v4, v6 := rs.V4, rs.V6
		if !w.egressOK {
			v4 = append([]string{"-A LEVER_EGRESS -j ACCEPT"}, v4...)
		}
		list := func(rules []string) string {
			return "-P OUTPUT ACCEPT\n-N LEVER_EGRESS\n-A OUTPUT -j LEVER_EGRESS\n" + strings.Join(rules, "\n")
		}
		secs := []guesttest.Sec{
			{Name: "filter4", Out: list(v4)}, {Name: "filter6", Out: list(v6)},
			{Name: "alias4", Out: testAlias + " STREAM host.fake.internal"}, {Name: "alias6", RC: 2},
			{Name: "variant", Out: "iptables v1.8.9 (legacy)"},
			{Name: "containment.fake", Out: w.containment},
		}
		// the look for lev's installed copy a boot's call carries (Helper.LookPart)
		if strings.Contains(string(c.Stdin), "sec "+guestside.LookSection+" ") {
			rc := 113
			if w.helperInstalled {
				rc = 0
			}
			secs = append(secs, guesttest.Sec{Name: guestside.LookSection, RC: rc})
		}
		return secs
	}
	j.r.On("observe", guesttest.Script("podman_service"), failing("observe", guesttest.Sections(func(c guest.Cmd) []guesttest.Sec {
		w.mu.Lock()
		stamp := "none\n"
		if w.stampCurrent {
			stamp = "0 644\n" + w.provisionHash + " " + testBoot
		}
		secs := []guesttest.Sec{{Name: "stamp", Out: testBoot + "\n" + stamp}}
		uid := "none"
		if w.userExists {
			uid = fmt.Sprint(testUID)
		}
		secs = append(secs, guesttest.Sec{Name: "uid", Out: uid})
		up := "down"
		if w.serviceUp {
			up = "up"
		}
		secs = append(secs, guesttest.Sec{Name: "podman", Out: up}, guesttest.Sec{Name: "statussum", Out: strings.Repeat("5", 64)})
		if w.userExists {
			for _, a := range guesttest.Args(c)[3:] {
				set, cert := guesttest.Sec{Name: "settings." + a, RC: 1}, guesttest.Sec{Name: "cert." + a, RC: 1}
				if w.settingsOK {
					set = guesttest.Sec{Name: "settings." + a, Out: w.settingsHash}
				}
				if w.enrolled {
					mark, _ := guesttest.ScriptMark(c)
					cert = guesttest.Sec{Name: "cert." + a, Out: strings.ReplaceAll(w.certPEM, "{{NONCE}}", mark)}
				}
				secs = append(secs, guesttest.Sec{Name: "dirs." + a, Out: "ok"}, set, cert)
			}
		}
		if w.helperInstalled && guesttest.Env(c, "LEVER_HELPER") != "" {
			secs = append(secs, guesttest.Sec{Name: "helper", Out: "present"})
		}
		if w.userExists && guesttest.Env(c, "LEVER_MOUNTS_REQ") != "" {
			// the running containers' mounts and channels, all proven
			ans := `{"proofs":{},"channels":{}}`
			if w.mountsAnswer != "" {
				ans = w.mountsAnswer
			}
			secs = append(secs, guesttest.Sec{Name: "mounts", Out: ans})
		}
		w.mu.Unlock()
		if guesttest.Env(c, "LEVER_ALIAS") != "" {
			secs = append(secs, snapshot(c)...)
		}
		return secs
	})))
	// The rebuild commits and then reads the chains back in the same call (its script
	// carries the snapshot's too, so it is matched first).
	j.r.On("egress-apply", guesttest.Script("--noflush"), failing("egress-apply", guesttest.Sections(func(c guest.Cmd) []guesttest.Sec {
		w.mu.Lock()
		w.egressOK = true
		w.mu.Unlock()
		secs := []guesttest.Sec{{Name: "j6"}, {Name: "j4"}, {Name: "c6"}, {Name: "c4"}}
		return append(append(secs, snapshot(c)...), guesttest.Sec{Name: guest.ReadBackDone})
	})))
	j.r.On("snapshot", guesttest.Script("secv filter4"), failing("snapshot", guesttest.Sections(snapshot)))
	j.r.On("stamp-read", guesttest.Script(`read_stamp "$1"`), failing("stamp-read", func(guest.Cmd) (guest.Result, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stampCurrent {
			return guest.Result{Stdout: []byte(testBoot + "\n0 644\n" + w.provisionHash + " " + testBoot + "\n")}, nil
		}
		return guest.Result{Stdout: []byte(testBoot + "\nnone\n")}, nil
	}))
	j.r.On("provision", guesttest.Script("LEVER_RUN_USER="), failing("provision", guesttest.Sections(func(guest.Cmd) []guesttest.Sec {
		w.mu.Lock()
		gate := w.provisionGate
		w.mu.Unlock()
		if err := waitGate(gate, "provisioning"); err != nil {
			return []guesttest.Sec{{Name: "uid", RC: 1, Out: err.Error()}}
		}
		w.mu.Lock()
		w.stampCurrent, w.userExists = true, true
		w.mu.Unlock()
		return []guesttest.Sec{{Name: "change.1", Out: "created run user lever"}, {Name: "uid", Out: fmt.Sprint(testUID)}, {Name: "runtime", Out: "runc"}}
	})))
	j.r.On("uid", guesttest.Argv0("id", "-u"), failing("uid", guesttest.OK(fmt.Sprintf("%d\n", testUID))))
	j.r.On("podman-service", guesttest.Script("podman system service"), failing("podman-service", guesttest.Sections(func(guest.Cmd) []guesttest.Sec {
		w.mu.Lock()
		w.serviceUp = true
		w.mu.Unlock()
		return []guesttest.Sec{{Name: "service", Out: "started"}}
	})))
	j.r.On("enrol", guesttest.Script(guestside.Command+"\x00"+guestside.ModeEnrol), failing("enrol", func(guest.Cmd) (guest.Result, error) {
		if err := waitGate(w.enrolGate, "enrol"); err != nil {
			return guest.Result{ExitCode: 1, Stderr: []byte(err.Error())}, nil
		}
		w.mu.Lock()
		w.enrolled, w.settingsOK = true, true
		if w.enrolDone != nil {
			close(w.enrolDone)
			w.enrolDone = nil
		}
		w.mu.Unlock()
		return guest.Result{Stdout: []byte("enrolled u-manager\n")}, nil
	}))
	j.r.On("mount-check", helperCall(guestside.ModeMounts), failing("mount-check", guesttest.OK("")))
}

// cold makes the jail's guest a fresh one: down, nothing provisioned, no images, no
// containers, no broker.
func (j *tjail) cold() {
	j.w.down, j.w.stampCurrent, j.w.userExists, j.w.serviceUp, j.w.enrolled, j.w.settingsOK, j.w.egressOK = true, false, false, false, false, false, false
	// lev.image is the user's (no registry): it is in podman from the start
	j.pod.images = map[string]bool{testBaseRef: true, "localhost/lever/lev:test": true}
	j.pod.containers = map[string]containers.State{}
	j.broker.running, j.broker.sans = false, nil
}

// testCA writes a CA where the broker keeps it and returns a client certificate it
// signed, valid for a day.
func testCA(t *testing.T, state string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "u-manager"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafT, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := brokerctl.CAPath(state)
	os.MkdirAll(filepath.Dir(p), 0o700)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}))
}

// helperCall matches a call of lev's helper mode, run in place (lev's path, then the
// mode) or from the guest's cached copy (a script ending by exec'ing it).
func helperCall(mode string) func(guest.Cmd) bool {
	inPlace := guesttest.Script(guestside.Command + "\x00" + mode)
	return func(c guest.Cmd) bool {
		if inPlace(c) {
			return true
		}
		return len(c.Argv) == 3 && c.Argv[0] == "/bin/sh" && strings.HasSuffix(c.Argv[2], " "+guestside.Command+" "+mode)
	}
}
