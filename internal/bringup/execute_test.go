package bringup

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/imagebuild"
	"github.com/lever-jail/lever/internal/levimage"
)

func changedSteps(res *Result) []string {
	var out []string
	for _, s := range res.Steps {
		if s.Changed {
			out = append(out, s.ID)
		}
	}
	return out
}

func plannedChanges(p []Planned) []string {
	var out []string
	for _, s := range p {
		if s.Action != "keep" {
			out = append(out, s.ID)
		}
	}
	return out
}

func stepIDs() []string {
	var ids []string
	for _, s := range Steps {
		ids = append(ids, s.ID)
	}
	return ids
}

// TestWarmUpOneGuestCall: a warm up on a healthy jail changes nothing in ONE guest call,
// the observation, which carries the egress snapshot and the in-guest containment check;
// the host-side containment check runs too (no guest call). Positive control for the
// counter: the same jail with a drifted chain makes the apply and the re-verification
// calls on top.
func TestWarmUpOneGuestCall(t *testing.T) {
	j := healthyJail(t)
	res, err := j.in.Execute(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, j.out)
	}
	if res.Changed || res.GuestCalls != 1 || strings.Join(j.r.Names(), ",") != "observe" {
		t.Fatalf("warm up: changed %v (%v), %d guest calls %v\n%s", res.Changed, changedSteps(res), res.GuestCalls, j.r.Names(), j.out)
	}
	if obs := j.r.Calls()[0]; !strings.Contains(string(obs.Cmd.Stdin), "\nput containment.fake contained\n") {
		t.Errorf("the observation call does not carry the containment check")
	}
	if j.be.hostChk != 1 || j.be.ensureUp != 0 {
		t.Errorf("host containment checks %d, EnsureUp %d; want 1, 0", j.be.hostChk, j.be.ensureUp)
	}
	if !strings.Contains(j.out.String(), "nothing changed") || !strings.Contains(j.out.String(), "1 guest calls") {
		t.Errorf("summary:\n%s", j.out)
	}
	// lever up prints the status after the run: from the run's own observation when
	// nothing changed, so the whole warm up stays one guest call.
	if st := j.in.StatusAfter(context.Background(), res); !st.Healthy || len(j.r.Calls()) != 1 {
		t.Errorf("status after a warm up: healthy %v, guest calls %v", st.Healthy, j.r.Names())
	}
	j.r.Reset()
	j.w.egressOK = false
	res, err = j.in.Execute(context.Background())
	// The rebuild reads the chains back in its own call: no separate snapshot.
	if err != nil || strings.Join(j.r.Names(), ",") != "observe,egress-apply" || res.GuestCalls != 2 {
		t.Fatalf("drifted warm up: %v, calls %v (%d)", err, j.r.Names(), res.GuestCalls)
	}
	// After a change the status observes again (the control: StatusAfter does call the
	// guest when the run's observation is stale).
	if st := j.in.StatusAfter(context.Background(), res); !st.Egress.Verified || strings.Join(j.r.Names(), ",") != "observe,egress-apply,observe" {
		t.Errorf("status after a repair: verified %v, guest calls %v", st.Egress.Verified, j.r.Names())
	}
}

// TestStepSkipRules: each row breaks exactly one thing in a healthy jail. The step that
// owns it is the only one the plan says it will change, the only one that changes, and
// the guest calls are exactly the ones it needs; every other step's skip rule holds.
func TestStepSkipRules(t *testing.T) {
	cases := []struct {
		name  string
		step  string
		brk   func(j *tjail)
		calls string
		check func(t *testing.T, j *tjail)
		// planAlso: steps the plan cannot call current from this observation
		planAlso []string
	}{
		{"egress drift", StepEgress, func(j *tjail) { j.w.egressOK = false }, "observe,egress-apply", nil, nil},
		{"stamp from another boot", StepProvision, func(j *tjail) { j.w.stampCurrent = false }, "observe,provision", nil, nil},
		{"podman service down", StepPodman, func(j *tjail) { j.w.serviceUp = false }, "observe,podman-service", func(t *testing.T, j *tjail) {
			if j.pod.dials != 1 {
				t.Errorf("podman dialled %d times, want 1 (after the start)", j.pod.dials)
			}
		}, []string{StepImage, StepLev}}, // with the service down, images and containers are unknown
		{"broker down", StepBroker, func(j *tjail) { j.broker.running = false }, "observe", func(t *testing.T, j *tjail) {
			if j.broker.starts != 1 || j.broker.sans[0] != testAlias {
				t.Errorf("broker starts %d, SANs %v", j.broker.starts, j.broker.sans)
			}
		}, nil},
		{"broker certificate without the alias", StepBroker, func(j *tjail) { j.broker.sans = []string{"10.9.9.9"} }, "observe", func(t *testing.T, j *tjail) {
			if j.broker.stops != 1 || j.broker.starts != 1 {
				t.Errorf("broker stops %d starts %d, want 1, 1", j.broker.stops, j.broker.starts)
			}
		}, nil},
		{"agents not enrolled", StepEnrol, func(j *tjail) { j.w.enrolled = false }, "observe,enrol", nil, nil},
		{"lev settings stale", StepEnrol, func(j *tjail) { j.w.settingsOK = false }, "observe,enrol", nil, nil},
		{"workbench missing", StepImage, func(j *tjail) {
			for ref := range j.pod.images {
				if strings.Contains(ref, "workbench") {
					delete(j.pod.images, ref)
				}
			}
		}, "observe", func(t *testing.T, j *tjail) {
			if j.pod.writes != 1 {
				t.Errorf("%d image writes, want 1 (the workbench layered on the base)", j.pod.writes)
			}
		}, nil},
		{"worker stopped", StepLev, func(j *tjail) {
			n := containers.ContainerName("u", containers.Worker, "a")
			j.pod.containers[n] = containers.State{Name: n}
		}, "observe,mount-check", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := healthyJail(t)
			tc.brk(j)
			plan := j.in.Plan(j.in.ObserveWithEgress(context.Background()))
			if got := plannedChanges(plan); strings.Join(got, ",") != strings.Join(append([]string{tc.step}, tc.planAlso...), ",") {
				t.Errorf("plan changes %v, want only %s: %+v", got, tc.step, plan)
			}
			j.r.Reset()
			res, err := j.in.Execute(context.Background())
			if err != nil {
				t.Fatalf("%v\n%s", err, j.out)
			}
			if got := changedSteps(res); len(got) != 1 || got[0] != tc.step {
				t.Errorf("changed %v, want only %s\n%s", got, tc.step, j.out)
			}
			if got := strings.Join(j.r.Names(), ","); got != tc.calls || res.GuestCalls != int64(len(j.r.Calls())) {
				t.Errorf("guest calls %s (%d counted), want %s", got, res.GuestCalls, tc.calls)
			}
			if tc.check != nil {
				tc.check(t, j)
			}
			// and the repair holds: the next up changes nothing in one call
			j.r.Reset()
			if res, err := j.in.Execute(context.Background()); err != nil || res.Changed || res.GuestCalls != 1 {
				t.Errorf("up after the repair: %v, changed %v, %d calls\n%s", err, changedSteps(res), res.GuestCalls, j.out)
			}
		})
	}
}

// TestStepFailures: a failure at each step stops the bring-up there, names the step in
// the error and on its progress line, and makes no guest call after it.
func TestStepFailures(t *testing.T) {
	cases := []struct {
		step string
		brk  func(j *tjail)
		want string
	}{
		{StepJail, func(j *tjail) { j.be.hostErr = errorString("lima: the realized config mounts the host home") }, "realized config mounts"},
		{StepJail, func(j *tjail) { j.cold(); j.w.fail = "ensureup" }, "hypervisor refused"},
		{StepEgress, func(j *tjail) { j.w.containment = "eth1 has a default route" }, "containment drifted"},
		{StepEgress, func(j *tjail) { j.w.egressOK = false; j.w.fail = "egress-apply" }, "applying egress"},
		{StepProvision, func(j *tjail) { j.w.stampCurrent = false; j.w.fail = "provision" }, "provision failed in the fake guest"},
		{StepPodman, func(j *tjail) { j.w.serviceUp = false; j.w.fail = "podman-service" }, "podman-service failed"},
		{StepPodman, func(j *tjail) { j.pod.fail = "dial" }, "no podman for uid"},
		{StepBroker, func(j *tjail) { j.broker.running = false; j.broker.fail = true }, "starting the broker: port 7443 in use"},
		{StepEnrol, func(j *tjail) { j.w.enrolled = false; j.w.fail = "enrol" }, "enrolling in the guest"},
		{StepImage, func(j *tjail) {
			for ref := range j.pod.images {
				if strings.Contains(ref, "workbench") {
					delete(j.pod.images, ref)
				}
			}
			j.pod.fail = "layer"
		}, "workbench: podman build: boom"},
		{StepImage, func(j *tjail) { delete(j.pod.images, "localhost/lever/lev:test") }, "lev.image localhost/lever/lev:test is not in the run user's podman"},
		{StepLev, func(j *tjail) {
			n := containers.ContainerName("u", containers.Worker, "a")
			j.pod.containers[n] = containers.State{Name: n}
			j.w.fail = "mount-check"
		}, `refused: "mount-check failed`},
		{StepLev, func(j *tjail) {
			n := containers.ContainerName("u", containers.Worker, "a")
			j.pod.containers[n] = containers.State{Name: n}
			j.pod.fail = "exits"
		}, "is exited (exit 1): lev: bad config"},
	}
	for _, tc := range cases {
		t.Run(tc.step+": "+tc.want, func(t *testing.T) {
			j := healthyJail(t)
			tc.brk(j)
			res, err := j.in.Execute(context.Background())
			if err == nil || !strings.HasPrefix(err.Error(), tc.step+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %s: ...%s\n%s", err, tc.step, tc.want, j.out)
			}
			idx := -1
			for i, s := range Steps {
				if s.ID == tc.step {
					idx = i
				}
			}
			if len(res.Steps) != idx {
				t.Errorf("%d steps completed before the failure, want %d", len(res.Steps), idx)
			}
			if !regexp.MustCompile(`\[\d/8\] ` + tc.step + ` +FAILED after`).MatchString(j.out.String()) {
				t.Errorf("no FAILED line for %s:\n%s", tc.step, j.out)
			}
			if tc.step == StepEgress && strings.Contains(strings.Join(j.r.Names(), ","), "egress-apply") && strings.Contains(tc.want, "containment") {
				t.Errorf("the chains were rebuilt despite the containment drift: %v", j.r.Names())
			}
		})
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TestColdUp: from nothing, every step changes something, in the table's order, with
// the guest calls each needs; the next up is warm (one call).
func TestColdUp(t *testing.T) {
	j := healthyJail(t)
	j.cold()
	res, err := j.in.Execute(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, j.out)
	}
	if got := strings.Join(changedSteps(res), ","); got != strings.Join(stepIDs(), ",") {
		t.Errorf("cold up changed %s, want every step\n%s", got, j.out)
	}
	// The egress step: a snapshot (the cold observation could not carry it), then the
	// rebuild, which reads the chains back in the same call. No stamp read: a guest that
	// did not answer the observation has just booted.
	want := "observe,snapshot,egress-apply,provision,podman-service,enrol,mount-check,mount-check"
	if got := strings.Join(j.r.Names(), ","); got != want || res.GuestCalls != 8 {
		t.Errorf("cold guest calls (%d): %s\nwant %s", res.GuestCalls, got, want)
	}
	t.Logf("cold up on the fake: %d guest calls: %s", res.GuestCalls, strings.Join(j.r.Names(), ","))
	j.r.Reset()
	res, err = j.in.Execute(context.Background())
	if err != nil || res.Changed || res.GuestCalls != 1 {
		t.Errorf("up after the cold one: %v, changed %v, %d calls", err, changedSteps(res), res.GuestCalls)
	}
}

// TestLevStepContainersOneAfterAnother: the lev step makes its containers one after the
// other (a fresh rootless podman refused a second create beside the first: step_lev.go).
// Each create waits up to 0.2 s for a second one in flight; none comes.
func TestLevStepContainersOneAfterAnother(t *testing.T) {
	j := healthyJail(t)
	j.cold()
	j.pod.together = 2
	if _, err := j.in.Execute(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, j.out)
	}
	if j.pod.overlapped || len(j.pod.containers) != 4 {
		t.Errorf("the lev step's %d containers: overlapped %v\n%s", len(j.pod.containers), j.pod.overlapped, j.out)
	}
}

// TestColdUpSnapshotAfterBoot: a backend that reads the guest after booting it
// (UpSnapshotter, Lima) takes the egress snapshot in that call, and the egress step judges
// it: the step's one call is the rebuild. Control: the same cold jail on a backend without
// the ability takes its own snapshot (two calls in the step).
func TestColdUpSnapshotAfterBoot(t *testing.T) {
	for _, carried := range []bool{true, false} {
		j := healthyJail(t)
		j.cold()
		sb := &snapBackend{fakeBackend: j.be}
		if carried {
			j.in.b = sb
		}
		res, err := j.in.Execute(context.Background())
		if err != nil {
			t.Fatalf("carried=%v: %v\n%s", carried, err, j.out)
		}
		var egressCalls int64 = -1
		for _, s := range res.Steps {
			if s.ID == StepEgress {
				egressCalls = s.Calls
			}
		}
		want, wantSnaps := int64(2), 0
		if carried {
			want, wantSnaps = 1, 1
		}
		if egressCalls != want || sb.snaps != wantSnaps {
			t.Errorf("carried=%v: the egress step made %d guest calls (want %d), the backend %d snapshots (want %d)\n%s", carried, egressCalls, want, sb.snaps, wantSnaps, j.out)
		}
		// the same guest calls either way, in the same order: the snapshot only moved
		if got := strings.Join(j.r.Names(), ","); got != "observe,snapshot,egress-apply,provision,podman-service,enrol,mount-check,mount-check" {
			t.Errorf("carried=%v: guest calls %s", carried, got)
		}
		if !j.w.egressOK {
			t.Errorf("carried=%v: the chains were not rebuilt", carried)
		}
	}
}

// TestColdUpBootSnapshotJudged: the snapshot read after the boot is judged as the egress
// step's own: a containment drift in it is refused before anything in the guest changes.
func TestColdUpBootSnapshotJudged(t *testing.T) {
	j := healthyJail(t)
	j.cold()
	j.w.containment = "a stray mount"
	j.in.b = &snapBackend{fakeBackend: j.be}
	_, err := j.in.Execute(context.Background())
	if err == nil || !strings.Contains(err.Error(), "egress: ") || !strings.Contains(err.Error(), "fake guest not contained") {
		t.Fatalf("err = %v, want the egress step's containment refusal\n%s", err, j.out)
	}
	for _, n := range j.r.Names() {
		if n == "egress-apply" || n == "provision" {
			t.Errorf("guest calls %v: %s ran after a refused containment check", j.r.Names(), n)
		}
	}
}

// TestDryRunAndUpPrintTheSameSteps: the dry run's lines and up's progress lines name the
// same steps in the same order, the table's, on a cold and on a warm jail.
func TestDryRunAndUpPrintTheSameSteps(t *testing.T) {
	for _, cold := range []bool{false, true} {
		j := healthyJail(t)
		if cold {
			j.cold()
		}
		var dry strings.Builder
		PrintPlan(&dry, j.in.Plan(j.in.ObserveWithEgress(context.Background())))
		if _, err := j.in.Execute(context.Background()); err != nil {
			t.Fatal(err)
		}
		dryIDs := regexp.MustCompile(`(?m)^\d+\. (\S+)`).FindAllStringSubmatch(dry.String(), -1)
		upIDs := regexp.MustCompile(`(?m)^\[\d+/\d+\] (\S+)`).FindAllStringSubmatch(j.out.String(), -1)
		var d, u []string
		for _, m := range dryIDs {
			d = append(d, m[1])
		}
		for _, m := range upIDs {
			u = append(u, m[1])
		}
		if strings.Join(d, ",") != strings.Join(stepIDs(), ",") || strings.Join(u, ",") != strings.Join(d, ",") {
			t.Errorf("cold=%v: dry run %v, up %v, table %v", cold, d, u, stepIDs())
		}
	}
}

// TestStepTable: the order docs/bringup.md gives (the guest, then egress before anything that
// starts a process in it), each step complete, and Needs/Gives naming facts an earlier step
// (or the observation) gives. Each Fact names a Facts field, one to one, and with copies
// that field and no other.
func TestStepTable(t *testing.T) {
	if got := strings.Join(stepIDs(), ","); got != "jail,egress,provision,broker,podman,enrol,image,lev" {
		t.Fatalf("steps %s", got)
	}
	ft := reflect.TypeOf(Facts{})
	if ft.NumField() != int(numFacts) {
		t.Fatalf("Facts has %d fields, %d Fact constants", ft.NumField(), numFacts)
	}
	for n := Fact(0); n < numFacts; n++ {
		field, ok := ft.FieldByName(n.String())
		if !ok {
			t.Fatalf("%v names no Facts field", n)
		}
		// set every field of g to a non-zero value; with(g, n) must change exactly field n
		var g Facts
		gv := reflect.ValueOf(&g).Elem()
		for i := 0; i < gv.NumField(); i++ {
			setNonZero(t, gv.Field(i))
		}
		got := reflect.ValueOf(Facts{}.with(g, []Fact{n}))
		for i := 0; i < got.NumField(); i++ {
			if changed := !got.Field(i).IsZero(); changed != (i == field.Index[0]) {
				t.Errorf("with(%v) changed %s: %v", n, ft.Field(i).Name, changed)
			}
		}
	}
	given := map[Fact]bool{FactUID: true, FactStatusSum: true, FactImageRef: true, FactPodman: true} // the observation's
	for _, s := range Steps {
		if s.Plan == nil || s.Run == nil {
			t.Errorf("%s: no plan or run", s.ID)
		}
		for _, n := range s.Needs {
			if !given[n] {
				t.Errorf("%s needs %v, which no earlier step (or the observation) gives", s.ID, n)
			}
		}
		for _, n := range s.Gives {
			given[n] = true
		}
	}
	keys := make([]string, 0, len(given))
	for k := range given {
		keys = append(keys, k.String())
	}
	sort.Strings(keys)
	t.Logf("facts handed on: %v", keys)
}

// setNonZero gives v a non-zero value of its kind (a Facts field).
func setNonZero(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Int:
		v.SetInt(1)
	case reflect.String:
		v.SetString("x")
	case reflect.Interface:
		v.Set(reflect.ValueOf(&fakePodman{}))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	default:
		t.Fatalf("no non-zero value for a %s field", v.Kind())
	}
}

// TestOverlaps: on a cold up the steps that need nothing from the steps before them run
// beside those steps. Each row makes a step wait (a gate) for something only an
// overlapping step does; its positive control turns that step's Overlap off and the same
// up fails at the gate. The lines still print in the table's order, each step's guest
// calls are its own, and the lev step gets the image step's facts.
//   - lever's trees: the image step starts once provisioning is done, beside the broker
//     (the broker's start waits for the image helper's call);
//   - a workbench on a user's base needs podman: the image step starts after the podman
//     step, beside enrol (enrol's answer waits for the workbench's layering);
//   - enrol needs the broker, not podman: it runs beside the podman step (the podman
//     connection waits for enrol's answer).
func TestOverlaps(t *testing.T) {
	cases := []struct {
		name  string
		step  string // the step whose Overlap the control turns off
		setup func(t *testing.T) *tjail
		fails string // where the control fails
	}{
		{"trees: image beside broker", StepImage, func(t *testing.T) *tjail {
			j, _ := builtJail(t)
			j.cold()
			j.pod.images = map[string]bool{}
			made := make(chan struct{})
			var once sync.Once
			j.r.On("images", guesttest.Script(guestside.Command+"\x00"+guestside.ModeImages), func(c guest.Cmd) (guest.Result, error) {
				once.Do(func() { close(made) })
				var req imagebuild.Request
				if err := json.Unmarshal(c.Stdin, &req); err != nil || req.Bench == nil {
					return guest.Result{ExitCode: 1, Stderr: []byte("bad request")}, nil
				}
				b, _ := json.Marshal(imagebuild.Response{Lev: &imagebuild.LevTree{}, Bench: helperBench(req, strings.Repeat("5", 64), levimage.RootDirStats{Entries: 1})})
				return guest.Result{Stdout: b}, nil
			})
			j.broker.gate = made
			return j
		}, "broker: starting the broker: gate: nothing ran beside the broker's start"},
		{"user base: image beside enrol", StepImage, func(t *testing.T) *tjail {
			j := healthyJail(t)
			j.cold()
			j.pod.layered = make(chan struct{})
			j.w.enrolGate = j.pod.layered
			return j
		}, "gate: nothing ran beside enrol"},
		{"enrol beside podman", StepEnrol, func(t *testing.T) *tjail {
			j := healthyJail(t)
			j.cold()
			j.w.enrolDone = make(chan struct{})
			j.pod.dialGate = j.w.enrolDone
			return j
		}, "podman: no connection"},
	}
	for _, tc := range cases {
		for _, overlap := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/overlap=%v", tc.name, overlap), func(t *testing.T) {
				j := tc.setup(t)
				for i := range Steps {
					if Steps[i].ID == tc.step {
						old := Steps[i].Overlap
						Steps[i].Overlap = overlap
						defer func(i int) { Steps[i].Overlap = old }(i)
					}
				}
				res, err := j.in.Execute(context.Background())
				if !overlap {
					if err == nil || !strings.Contains(err.Error(), "gate: nothing ran beside") {
						t.Fatalf("without overlap: %v, want a failure at the gate (%s)", err, tc.fails)
					}
					return
				}
				if err != nil {
					t.Fatalf("%v\n%s", err, j.out)
				}
				lines := regexp.MustCompile(`(?m)^\[\d+/\d+\] (\S+)`).FindAllStringSubmatch(j.out.String(), -1)
				var ids []string
				for _, m := range lines {
					ids = append(ids, m[1])
				}
				if strings.Join(ids, ",") != strings.Join(stepIDs(), ",") {
					t.Errorf("lines %v", ids)
				}
				for _, s := range res.Steps {
					if s.ID == StepEnrol && s.Calls != 1 {
						t.Errorf("%s counted %d guest calls", s.ID, s.Calls)
					}
				}
				if res.facts.BenchRef == "" {
					t.Errorf("the image step's facts did not reach the lev step: %+v", res.facts)
				}
			})
		}
	}
}

// Up's observation asks for a short snapshot (its egress step rebuilds on any drift, and a
// guest with no chain at all is then read without the nft view); status and the dry run,
// which report what is there, read the whole view. The control is each call's own env.
func TestObservationShortOnlyForUp(t *testing.T) {
	j := healthyJail(t)
	if _, err := j.in.Execute(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, j.out)
	}
	short := func(what string, want string) {
		t.Helper()
		calls := j.r.Calls()
		if len(calls) == 0 || calls[0].Rule != "observe" {
			t.Fatalf("%s: calls %v", what, j.r.Names())
		}
		if got := guesttest.Env(calls[0].Cmd, "LEVER_SHORT"); got != want {
			t.Errorf("%s's observation: LEVER_SHORT=%q, want %q", what, got, want)
		}
		if guesttest.Env(calls[0].Cmd, "LEVER_IPT") == "" {
			t.Fatalf("%s's observation carries no snapshot", what)
		}
		j.r.Reset()
	}
	short("up", "1")
	j.in.Status(context.Background())
	short("status", "")
	j.in.DryRun(context.Background())
	short("the dry run", "")
}

// TestStaleProofsRestartTheirContainers: a running container whose in-tree mounts, or
// whose workbench's exec channel, the observation could not prove is replaced by the lev
// step (no --fresh), the others left alone; the plan names why. Control: the same jail
// with every proof good changes nothing (TestWarmUpOneGuestCall).
func TestStaleProofsRestartTheirContainers(t *testing.T) {
	j := healthyJail(t)
	if _, err := j.in.Execute(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, j.out)
	}
	j.w.mu.Lock()
	j.w.mountsAnswer = `{"proofs":{"lever-u-manager":"the container's /lever/x is writable, and was planned read-only","lever-u-worker-a":""},"channels":{"lever-u-worker-a-bench":"the answer is not the workbench's (it carries no proof)","lever-u-manager-bench":""}}`
	j.w.mu.Unlock()
	j.out.Reset()
	res, err := j.in.Execute(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, j.out)
	}
	var lev StepResult
	for _, s := range res.Steps {
		if s.ID == StepLev {
			lev = s
		}
	}
	for _, want := range []string{"lever-u-manager restarted", "lever-u-worker-a-bench restarted", "lever-u-worker-a unchanged", "lever-u-manager-bench unchanged"} {
		if !strings.Contains(lev.Detail, want) {
			t.Errorf("lev step %q does not say %q\n%s", lev.Detail, want, j.out)
		}
	}
	if !res.Changed || !lev.Changed {
		t.Errorf("a restart is a change: %v %v", res.Changed, lev.Changed)
	}
}
