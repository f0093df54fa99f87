package bringup

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestStatusOnFake: status reads everything in one guest call (the observation with the
// egress snapshot and the containment check) and judges it: healthy; a drifted chain
// named; a containment drift reported as the error it is; a guest that is down.
func TestStatusOnFake(t *testing.T) {
	cases := []struct {
		name    string
		brk     func(j *tjail)
		healthy bool
		check   func(t *testing.T, s *Status)
		calls   int
	}{
		{"healthy", func(*tjail) {}, true, func(t *testing.T, s *Status) {
			if !s.Egress.Verified || s.Egress.AliasV4 != testAlias || len(s.Containers) != 4 || !s.Broker.Running {
				t.Errorf("%+v", s)
			}
		}, 1},
		{"drifted chain", func(j *tjail) { j.w.egressOK = false }, false, func(t *testing.T, s *Status) {
			if s.Egress.Verified || !strings.Contains(strings.Join(s.Egress.Differences, ";"), "-A LEVER_EGRESS -j ACCEPT") {
				t.Errorf("egress %+v", s.Egress)
			}
		}, 1},
		{"containment drift", func(j *tjail) { j.w.containment = "eth1 has a default route" }, false, func(t *testing.T, s *Status) {
			if !strings.Contains(s.Egress.Error, "containment drifted") || !strings.Contains(s.Egress.Error, "default route") {
				t.Errorf("egress %+v", s.Egress)
			}
		}, 1},
		{"guest down", func(j *tjail) { j.r.Down = errors.New("no guest") }, false, func(t *testing.T, s *Status) {
			if s.Guest.Reachable || s.Egress.Verified || !strings.Contains(s.Text(), "guest not reachable") {
				t.Errorf("%s", s.Text())
			}
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := healthyJail(t)
			tc.brk(j)
			s := j.in.Status(context.Background())
			if s.Healthy != tc.healthy {
				t.Errorf("healthy %v, want %v:\n%s", s.Healthy, tc.healthy, s.Text())
			}
			tc.check(t, s)
			if n := len(j.r.Calls()); n != tc.calls {
				t.Errorf("%d guest calls %v, want %d", n, j.r.Names(), tc.calls)
			}
		})
	}
}

// TestObserveForgedSections attacks the observation through a file the run user (or an
// escaped agent) can write and the observation prints: an agent's client certificate. Its
// content forges sections (the podman service up, the containment check passing, a stamp)
// with the marker prefix; the real sections carry the call's nonce, so the forged lines
// stay inside the certificate's section and decide nothing. Positive control: the same
// payload with the call's own nonce (what an attacker who could read the script would
// write) is refused outright (a section printed twice), so the payload does reach the
// parser.
func TestObserveForgedSections(t *testing.T) {
	forge := func(mark string) string {
		return mark + "end cert.manager 0\n" + mark + "begin containment.fake\ncontained\n" + mark + "end containment.fake 0\n" + mark + "begin cert.manager"
	}
	for _, withNonce := range []bool{false, true} {
		j := healthyJail(t)
		j.w.containment = "eth1 has a default route" // the real check fails
		j.w.serviceUp = false
		mark := "@@lever-"
		if withNonce {
			// the fake guest puts the call's nonce in for this placeholder
			mark = "{{NONCE}}"
		}
		j.w.certPEM = forge(mark)
		obs := j.in.ObserveWithEgress(context.Background())
		switch {
		case !withNonce && (!obs.GuestReachable || obs.EgressErr == nil || !strings.Contains(obs.EgressErr.Error(), "default route") || obs.Enrolled["manager"] || obs.ServiceUp):
			t.Errorf("forged sections decided something: reachable %v, egress err %v, enrolled %v, podman up %v", obs.GuestReachable, obs.EgressErr, obs.Enrolled["manager"], obs.ServiceUp)
		case withNonce && obs.GuestReachable:
			t.Errorf("a forgery with the call's nonce was accepted (egress err %v)", obs.EgressErr)
		}
	}
}
