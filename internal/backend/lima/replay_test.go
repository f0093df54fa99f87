package lima

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
)

// exchange is one guest round-trip recorded from the real VM.
type exchange struct {
	Argv     []string `json:"argv"`
	As       string   `json:"as"`
	Stdin    string   `json:"stdin,omitempty"`
	Stdout   string   `json:"stdout"`
	Stderr   string   `json:"stderr,omitempty"`
	ExitCode int      `json:"exit_code"`
}

// recordedMark stands for a guest.Script's marker in a recording: the script text and
// its answer are recorded with it and replayed with the live call's marker.
const recordedMark = "@@lever-NONCE-"

// scriptMark is the marker a guest.Script's first line sets ("" for other commands).
func scriptMark(c guest.Cmd) string {
	first, _, _ := strings.Cut(string(c.Stdin), "\n")
	if !strings.HasPrefix(first, "M='@@lever-") {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(first, "M='"), "'")
}

// replay answers with recorded exchanges, in order, and fails on any command that is not
// exactly the recorded one: a changed guest protocol shows up here, not as a silent pass.
type replay struct {
	ex []exchange
	i  int
}

func (r *replay) Run(_ context.Context, c guest.Cmd) (guest.Result, error) {
	if r.i >= len(r.ex) {
		return guest.Result{}, fmt.Errorf("replay: unexpected extra call %q", c.Argv)
	}
	e := r.ex[r.i]
	r.i++
	stdin, stdout := string(c.Stdin), e.Stdout
	if mark := scriptMark(c); mark != "" {
		stdin, stdout = strings.ReplaceAll(stdin, mark, recordedMark), strings.ReplaceAll(stdout, recordedMark, mark)
	}
	if strings.Join(e.Argv, "\x00") != strings.Join(c.Argv, "\x00") || e.As != c.As.String() || e.Stdin != stdin {
		return guest.Result{}, fmt.Errorf("replay: call %d is %q as %s, recorded %q as %s", r.i, c.Argv, c.As, e.Argv, e.As)
	}
	return guest.Result{Stdout: []byte(stdout), Stderr: []byte(e.Stderr), ExitCode: e.ExitCode}, nil
}

// verifiedBringUp is the guest half of a verified, unchanged `lever egress apply` on Lima:
// the bring-up guest check, then the egress check that finds the chains as desired.
func verifiedBringUp(ctx context.Context, r guest.Runner, spec guest.EgressSpec) error {
	// EnsureUpWithSnapshot's one call after the boot, then the egress step on its answer,
	// asked as bring-up asks (RebuildRequest)
	req := spec.RebuildRequest()
	if !carriesFacts(req) {
		return fmt.Errorf("the spec's snapshot does not read Lima's facts")
	}
	secs, f, err := gatherWithSnapshot(ctx, r, req)
	if err != nil {
		return err
	}
	if err := CheckFacts(f, "fuse.sshfs", false); err != nil {
		return err
	}
	snap, err := guest.ParseSnapshot(secs, req)
	if err != nil {
		return err
	}
	rep, err := guest.EnsureEgressFrom(ctx, r, spec, snap)
	if err != nil {
		return err
	}
	if rep.Outcome != guest.Unchanged {
		return fmt.Errorf("egress outcome %v, want unchanged", rep.Outcome)
	}
	return nil
}

// recording is what the e2e test saves: the egress spec lever derived from its lever.yaml
// and the guest exchanges of one verified bring-up.
type recording struct {
	// Converted says how a recording was brought to a changed script without a VM (a new
	// recording from TestLimaE2E has none).
	Converted string           `json:"converted,omitempty"`
	Spec      guest.EgressSpec `json:"spec"`
	Tree      string           `json:"tree,omitempty"` // the host tree the VM mounts at /lever
	Exchanges []exchange       `json:"exchanges"`
}

func loadRecording(tb testing.TB) recording {
	raw, err := os.ReadFile("testdata/guest-verified-bringup.json")
	if err != nil {
		tb.Fatal(err)
	}
	var rec recording
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&rec); err != nil {
		tb.Fatal(err)
	}
	return rec
}

// The recorded guest state from the real VM passes the bring-up checks in ONE call (the
// snapshot that carries Lima's facts); the facts read from it are the facts call's, both
// recorded from the same guest; the same state with /lever unmounted fails closed.
func TestVerifiedBringUpOnRecordedGuest(t *testing.T) {
	rec := loadRecording(t)
	if len(rec.Exchanges) != 2 {
		t.Fatalf("the recording has %d exchanges, want the facts call and the bring-up's one: re-record it", len(rec.Exchanges))
	}
	ex := rec.Exchanges[1:]
	c := &guest.Counting{Inner: &replay{ex: ex}}
	if err := verifiedBringUp(context.Background(), c, rec.Spec); err != nil {
		t.Fatal(err)
	}
	if c.Calls() != 1 {
		t.Fatalf("%d calls, want 1", c.Calls())
	}
	f, err := GatherFacts(context.Background(), &replay{ex: rec.Exchanges[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if f.AliasV4.String() != "192.168.5.2" || len(f.DNS) != 2 || f.DNS[0].Addr.String() != "192.168.5.2" || f.MountFSType != "fuse.sshfs" {
		t.Errorf("facts from the real guest: alias %v, LIMADNS %+v, /lever %q", f.AliasV4, f.DNS, f.MountFSType)
	}
	_, carried, err := gatherWithSnapshot(context.Background(), &replay{ex: ex}, rec.Spec.RebuildRequest())
	if err != nil || !reflect.DeepEqual(carried, f) {
		t.Errorf("facts read from the snapshot differ from the facts call's:\n%+v (%v)\n%+v", carried, err, f)
	}
	// The same guest with /lever not mounted (what a 9p mount on a kernel without 9p looks
	// like: Lima reports READY) or with /dev/kvm although nested_virt is off: refused.
	section := func(out, name string, f func(string) string) string {
		begin, end := recordedMark+"begin "+name+"\n", recordedMark+"end "+name+" "
		head, rest, _ := strings.Cut(out, begin)
		body, tail, ok := strings.Cut(rest, end)
		if !ok {
			t.Fatalf("the recording has no section %s: re-record it", name)
		}
		return head + begin + f(body) + end + tail
	}
	for _, c := range []struct {
		name string
		edit func(string) string
		want string
	}{
		{"unmounted", func(out string) string {
			return section(out, guest.ContainmentPrefix+"mounts", func(b string) string {
				var keep []string
				for _, l := range strings.SplitAfter(b, "\n") {
					if !strings.HasPrefix(l, MountPoint+" ") {
						keep = append(keep, l)
					}
				}
				return strings.Join(keep, "")
			})
		}, "/lever is not mounted in the guest"},
		{"kvm", func(out string) string {
			return section(out, guest.ContainmentPrefix+"kvm", func(string) string { return "yes\n" })
		}, "nested_virt is off but the guest has /dev/kvm"},
	} {
		bad := append([]exchange{}, ex...)
		bad[0].Stdout = c.edit(ex[0].Stdout) // the bring-up's one call
		if bad[0].Stdout == ex[0].Stdout {
			t.Fatalf("%s: the edit changed nothing", c.name)
		}
		if err := verifiedBringUp(context.Background(), &replay{ex: bad}, rec.Spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// BenchmarkLimaVerifiedBringUpGuestCalls counts the guest round-trips of a verified,
// unchanged bring-up, replaying outputs recorded from the real VM (each real round-trip
// costs ~0.15-1 s there; the e2e test logs the measured wall time).
func BenchmarkLimaVerifiedBringUpGuestCalls(b *testing.B) {
	rec := loadRecording(b)
	var calls int64
	for i := 0; i < b.N; i++ {
		c := &guest.Counting{Inner: &replay{ex: rec.Exchanges[1:]}}
		if err := verifiedBringUp(context.Background(), c, rec.Spec); err != nil {
			b.Fatal(err)
		}
		calls += c.Calls()
	}
	b.ReportMetric(float64(calls)/float64(b.N), "guest-calls/op")
}
