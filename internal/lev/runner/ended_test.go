package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadReportsUnwrittenEnds: a run whose end could not be written (run.json's
// temporary file made a directory, so every save fails) is reported by Engine.Load and
// List with that end and its cause; a run left "running" on disk that nobody drives reads
// failed; the control is a run the engine holds, which reads running, and a run whose
// end was written, which reads as written.
func TestLoadReportsUnwrittenEnds(t *testing.T) {
	e := &Engine{Store: &Store{Dir: t.TempDir()}}
	mk := func() *Record {
		r := &Record{ID: NewID(), Agent: "a", Status: StatusRunning, Created: time.Now().UTC()}
		if err := e.Store.Save(r); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // distinct ids are random; this keeps List's order plain
		return r
	}
	lost, orphan, held, written := mk(), mk(), mk(), mk()

	// lost: every save fails from now on; its end is kept.
	if err := os.Mkdir(filepath.Join(e.Store.RunDir(lost.ID), "run.json.tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	lost.Status, lost.Error = StatusFailed, "stage s: recording tool_calls.jsonl: no space left on device"
	if err := e.saveEnd(lost); err == nil {
		t.Fatal("the save did not fail: the test's fault does not hold")
	}
	e.mu.Lock()
	e.entry(held.ID).cancel = func() {}
	e.mu.Unlock()
	written.Status, written.Error = StatusFailed, "refused"
	if err := e.saveEnd(written); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		rec    *Record
		status Status
		want   string
	}{
		{lost, StatusFailed, "no space left on device; AND ITS RECORD COULD NOT BE WRITTEN: "},
		{orphan, StatusFailed, "lev is not driving this run"},
		{held, StatusRunning, ""},
		{written, StatusFailed, "refused"},
	}
	for _, tc := range cases {
		got, err := e.Load(tc.rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != tc.status || !strings.Contains(got.Error, tc.want) {
			t.Errorf("%s: %s %q, want %s %q", tc.rec.ID, got.Status, got.Error, tc.status, tc.want)
		}
		// On disk the first two still say running: the report is the engine's.
		if disk, _ := e.Store.Load(tc.rec.ID); tc.rec != written && disk.Status != StatusRunning {
			t.Errorf("%s on disk: %s", tc.rec.ID, disk.Status)
		}
	}
	list, err := e.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.ID != held.ID && r.Status == StatusRunning {
			t.Errorf("List: %s still running", r.ID)
		}
	}
}
