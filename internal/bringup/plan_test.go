package bringup

import (
	"strings"
	"testing"
)

func healthy() Observed {
	return Observed{
		GuestReachable: true, EgressMatch: true, StampCurrent: true, ServiceUp: true,
		BrokerRunning: true, BrokerSANOK: true, Enrolled: map[string]bool{"manager": true, "worker-a": true},
		Settings:     map[string]bool{"manager": true, "worker-a": true},
		ImagePresent: true, ImageRef: "localhost/lever/lev:abc",
		BenchPresent: true, BenchRef: "localhost/lever/workbench:def",
		Containers: map[string]ContainerState{"lever-d-manager": "running", "lever-d-worker-a": "running"},
	}
}

func TestPlan(t *testing.T) {
	agents := []string{"manager", "worker-a"}
	cs := []string{"lever-d-manager", "lever-d-worker-a"}
	cases := []struct {
		name   string
		mod    func(*Observed)
		step   string
		action Action
		why    string
	}{
		{"healthy: keep", func(*Observed) {}, StepLev, "keep", "every lev container"},
		{"nothing yet", func(o *Observed) { *o = Observed{} }, StepJail, "create", "not reachable"},
		{"nothing yet: egress first", func(o *Observed) { *o = Observed{} }, StepEgress, "create", "before anything starts"},
		{"drift names the rule", func(o *Observed) {
			o.EgressMatch, o.EgressDiff = false, []string{"IPv4: extra rule -A LEVER_EGRESS -j ACCEPT"}
		}, StepEgress, "repair", "-A LEVER_EGRESS -j ACCEPT"},
		{"stamp from another boot", func(o *Observed) { o.StampCurrent = false }, StepProvision, "create", "no current provisioning stamp"},
		{"podman down", func(o *Observed) { o.ServiceUp = false }, StepPodman, "start", "down"},
		{"broker cert lacks alias IP", func(o *Observed) { o.BrokerSANOK = false }, StepBroker, "repair", "alias IP"},
		{"broker down", func(o *Observed) { o.BrokerRunning = false }, StepBroker, "start", "not running"},
		{"worker not enrolled", func(o *Observed) { o.Enrolled["worker-a"] = false }, StepEnrol, "create", "worker-a"},
		{"settings stale on one agent", func(o *Observed) { o.Settings["worker-a"] = false }, StepEnrol, "create", "push lev settings and dirs to worker-a"},
		{"cert and settings both", func(o *Observed) { o.Settings["manager"], o.Enrolled["manager"] = false, false }, StepEnrol, "create", "enrol manager; push lev settings and dirs to manager"},
		{"image missing", func(o *Observed) { o.ImagePresent = false }, StepImage, "create", "localhost/lever/lev:abc"},
		{"images present: keep", func(*Observed) {}, StepImage, "keep", "workbench localhost/lever/workbench:def are loaded"},
		{"workbench missing", func(o *Observed) { o.BenchPresent = false }, StepImage, "create", "build the workbench localhost/lever/workbench:def"},
		{"workbench tag not known yet", func(o *Observed) { o.BenchPresent, o.BenchRef = false, "" }, StepImage, "create", "decided from the guest's packages"},
		{"worker stopped", func(o *Observed) { o.Containers["lever-d-worker-a"] = "stopped" }, StepLev, "create", "lever-d-worker-a (stopped)"},
		{"manager absent", func(o *Observed) { delete(o.Containers, "lever-d-manager") }, StepLev, "create", "lever-d-manager (create)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := healthy()
			tc.mod(&o)
			p := Plan(agents, cs, o)
			if len(p) != len(Steps) {
				t.Fatalf("%d steps", len(p))
			}
			for i, s := range p {
				if s.ID != Steps[i].ID {
					t.Fatalf("step %d is %s, want %s", i, s.ID, Steps[i].ID)
				}
				if s.ID == tc.step && (s.Action != tc.action || !strings.Contains(s.Why, tc.why)) {
					t.Fatalf("%s: %s %q, want %s containing %q", s.ID, s.Action, s.Why, tc.action, tc.why)
				}
			}
			if name := tc.name; name == "healthy: keep" && Changed(p) {
				t.Fatalf("healthy plan changes something: %+v", p)
			}
		})
	}
}
