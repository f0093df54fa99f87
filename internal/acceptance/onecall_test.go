package acceptance

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
	"github.com/lever-jail/lever/internal/guestside/probes"
)

// fakeHelper answers `lev __guest probe` as the real helper does, with a scripted
// snapshot: it runs "the snapshot" (guesttest.Sections on the carried command, so the
// answer carries the request's own nonce), aims the probes with aim (the real helper's
// probes.Aim on the carried snapshot's aliases, unless a row overrides it) and reports
// every probe as timed out.
func fakeHelper(t *testing.T, secs []guesttest.Sec, rc int, aim func(req Request, v4, v6 string) []Probe, forge string, last *Response) guesttest.Reply {
	return func(c guest.Cmd) (guest.Result, error) {
		var req Request
		if err := json.Unmarshal(c.Stdin, &req); err != nil {
			t.Fatalf("helper request: %v", err)
		}
		if req.Snapshot == nil {
			t.Fatal("the helper request carries no egress snapshot")
		}
		snapCmd := guest.Cmd{Argv: req.Snapshot.Argv, Stdin: []byte(req.Snapshot.Stdin)}
		out, err := guesttest.Sections(func(guest.Cmd) []guesttest.Sec { return secs })(snapCmd)
		if err != nil {
			t.Fatal(err)
		}
		ans := guest.CarriedAnswer{Stdout: string(out.Stdout), RC: rc}
		resp := Response{RunUID: -1, Snapshot: &ans, ScannedBytes: 4096, Scanned: 3}
		resp.AliasV4, resp.AliasV6 = req.Snapshot.Aliases(ans)
		resp.Probed = aim(req, resp.AliasV4, resp.AliasV6)
		for _, p := range resp.Probed {
			resp.Outcomes = append(resp.Outcomes, Outcome{ID: p.ID, Result: "timeout", ElapsedMS: 1500})
		}
		if forge != "" {
			resp.AliasV4 = forge
		}
		*last = resp
		b, _ := json.Marshal(resp)
		return guest.Result{Stdout: b}, nil
	}
}

func ownLev(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "lev")
	if err := os.WriteFile(p, []byte("#!/bin/false\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAcceptanceOneGuestCall: lever acceptance makes exactly one guest call, the lev
// helper carrying the egress snapshot; the probes go out aimed at placeholders and come
// back aimed at the alias the snapshot names (IPv6 only when global). Attack: a helper
// answer whose probes were aimed elsewhere than the returned snapshot says is refused;
// its positive control is the same answer honestly aimed, which is judged.
func TestAcceptanceOneGuestCall(t *testing.T) {
	honest := func(req Request, v4, v6 string) []Probe { return probes.Aim(req.Probes, v4, v6) }
	listing := "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT"
	resolved := []guesttest.Sec{
		{Name: "filter4", Out: listing}, {Name: "filter6", Out: listing},
		{Name: "alias4", Out: "10.9.8.7 STREAM host.test"},
		{Name: "alias6", Out: "2001:db8::7 STREAM host.test"},
		{Name: "variant", Out: "iptables v1.8.9 (legacy)"},
	}
	ula := append([]guesttest.Sec{}, resolved...)
	ula[3] = guesttest.Sec{Name: "alias6", Out: "fd00::7 STREAM host.test"}
	for _, tc := range []struct {
		name      string
		secs      []guesttest.Sec
		rc        int
		aim       func(Request, string, string) []Probe
		forge     string // an alias the answer claims instead of the one it read
		wantErr   string
		wantAddrs map[string]string // probe id -> address it ran at ("" = not run)
		wantEgr   string            // substring of the egress-chains detail
	}{
		{name: "alias from the snapshot", secs: resolved, aim: honest,
			wantAddrs: map[string]string{"alias:22": "10.9.8.7:22", "admin": "10.9.8.7:8444", "broker-tls": "10.9.8.7:8443", "alias6": "[2001:db8::7]:9"},
			wantEgr:   "LEVER_EGRESS"},
		{name: "unique-local IPv6 alias is not probed", secs: ula, aim: honest,
			wantAddrs: map[string]string{"alias:22": "10.9.8.7:22", "alias6": ""}},
		{name: "snapshot failed: egress fails, probes at the bare port", rc: 1, aim: honest,
			wantAddrs: map[string]string{"alias:22": ":22", "broker-tls": ":8443", "alias6": ""}, wantEgr: "sh exited 1"},
		{name: "attack: probes aimed elsewhere", secs: resolved,
			aim:     func(req Request, _, v6 string) []Probe { return probes.Aim(req.Probes, "10.0.0.99", v6) },
			wantErr: "aims them at"},
		{name: "attack: a forged alias, probes aimed at it", secs: resolved,
			aim:   func(req Request, _, v6 string) []Probe { return probes.Aim(req.Probes, "10.0.0.99", v6) },
			forge: "10.0.0.99", wantErr: "but the snapshot it returned names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var last Response
			lev := ownLev(t)
			r := &guesttest.Runner{}
			r.On("lev helper", func(c guest.Cmd) bool {
				return len(c.Argv) == 3 && c.Argv[0] == lev && c.Argv[1] == "__guest" && c.Argv[2] == "probe"
			}, fakeHelper(t, tc.secs, tc.rc, tc.aim, tc.forge, &last))
			spec := guest.EgressSpec{Posture: egress.Open, Alias: "host.test", Ports: []int{22}}
			rep, err := Run(context.Background(), Env{Instance: "t", Backend: "fake", Runner: r, Egress: spec, HelperLev: lev, HelperInPlace: true,
				Secrets:  [][]byte{[]byte("sk-test-0123456789abcdef0123456789")},
				BrokerCA: []byte("ca"),
				Expect:   Expect{AllowPorts: []int{22}, AdminPort: 8444, BrokerAddr: ":8443", Targets: DefaultTargets()}})
			if n := len(r.Calls()); n != 1 {
				t.Fatalf("%d guest calls (%v), want exactly 1", n, r.Names())
			}
			if len(r.Unmatched()) != 0 {
				t.Fatalf("unmatched guest calls: %v", r.Unmatched())
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want it to say %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ran := map[string]string{}
			for _, p := range last.Probed {
				ran[p.ID] = p.Addr
			}
			for id, want := range tc.wantAddrs {
				if ran[id] != want {
					t.Errorf("probe %s ran at %q, want %q (all: %v)", id, ran[id], want, ran)
				}
			}
			var egr string
			for _, x := range rep.Results {
				if x.ID == "egress-chains" {
					egr = x.Detail
				}
			}
			if tc.wantEgr != "" && !strings.Contains(egr, tc.wantEgr) {
				t.Fatalf("egress-chains detail %q, want %q", egr, tc.wantEgr)
			}
		})
	}
}
