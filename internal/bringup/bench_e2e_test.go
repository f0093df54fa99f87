//go:build e2e

package bringup_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
)

// benchInstance makes a closed-posture netns jail config (not yet up) for benchmarks.
func benchInstance(b *testing.B) (func() *bringup.Instance, func()) {
	testutil.RequireRoot(b)
	testutil.RequireTool(b, "podman")
	r := make([]byte, 3)
	rand.Read(r)
	sfx := hex.EncodeToString(r)
	dir := b.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(tree, 0o777)
	os.Chmod(tree, 0o777)
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-bench-"+sfx+"\n"), 0o600)
	srv := httptest.NewServer(http.NotFoundHandler())
	jp, ap := freePort(&testing.T{}), freePort(&testing.T{})
	cfgPath := filepath.Join(dir, "lever.yaml")
	y := testutil.NetnsYAML("b"+sfx, keyFile, srv.URL, jp, ap)
	y.ManagerPorts = []int{jp}
	y.Write(b, cfgPath)
	b.Setenv("LEVER_DEV_NETNS", "1")
	b.Setenv("LEVER_NETNS_PREFIX", "lvtb")
	b.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	b.Setenv("LEVER_LEV_BINARY", levBinary(&testing.T{}))
	b.Setenv(asLever, "1")
	exe, _ := os.Executable()
	mk := func() *bringup.Instance {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			b.Fatal(err)
		}
		be, err := backend.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		in, err := bringup.Load(context.Background(), bringup.Options{Cfg: cfg, Backend: be, Exe: exe})
		if err != nil {
			b.Fatal(err)
		}
		return in
	}
	cleanup := func() {
		lever(&testing.T{}, "destroy", "-c", cfgPath)
		mk().Teardown(context.Background())
		srv.Close()
	}
	return mk, cleanup
}

func report(b *testing.B, results []*bringup.Result) {
	steps := map[string]time.Duration{}
	var calls int64
	var total time.Duration
	for _, r := range results {
		for _, s := range r.Steps {
			steps[s.ID] += s.Duration
		}
		calls += r.GuestCalls
		total += r.Duration
	}
	n := float64(len(results))
	for _, st := range bringup.Steps {
		id := st.ID
		b.ReportMetric(float64(steps[id].Microseconds())/1000/n, id+"-ms")
	}
	b.ReportMetric(float64(calls)/n, "guest-calls/op")
	b.ReportMetric(float64(total.Microseconds())/1000/n, "total-ms")
}

// BenchmarkBringupCold: lever up from nothing (the previous iteration's jail destroyed,
// run user removed, image gone), per step.
func BenchmarkBringupCold(b *testing.B) {
	mk, cleanup := benchInstance(b)
	defer cleanup()
	var rs []*bringup.Result
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cleanup()
		b.StartTimer()
		r, err := mk().Execute(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		rs = append(rs, r)
	}
	report(b, rs)
}

// BenchmarkBringupWarm: lever up on a healthy jail (verifies, changes nothing).
func BenchmarkBringupWarm(b *testing.B) {
	mk, cleanup := benchInstance(b)
	defer cleanup()
	if _, err := mk().Execute(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var rs []*bringup.Result
	for i := 0; i < b.N; i++ {
		r, err := mk().Execute(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if r.Changed {
			b.Fatalf("warm bring-up changed something: %+v", r.Steps)
		}
		rs = append(rs, r)
	}
	report(b, rs)
}

// BenchmarkAcceptance: one lever acceptance run on a healthy jail (the dropped probes'
// 1.5 s timeouts run in parallel and dominate the time), with its guest round-trips.
func BenchmarkAcceptance(b *testing.B) {
	mk, cleanup := benchInstance(b)
	defer cleanup()
	if _, err := mk().Execute(context.Background()); err != nil {
		b.Fatal(err)
	}
	in := mk()
	b.ResetTimer()
	var rep *acceptance.Report
	for i := 0; i < b.N; i++ {
		in.Runner.Reset()
		var err error
		rep, err = in.Acceptance(context.Background(), acceptance.DefaultTargets())
		if err != nil {
			b.Fatal(err)
		}
		if len(rep.Results) < 12 {
			b.Fatalf("%d checks", len(rep.Results))
		}
	}
	b.ReportMetric(float64(in.Runner.Calls()), "guest-calls/op")
	for _, r := range rep.Results {
		if r.ID == "no-api-key" {
			b.Logf("no-api-key: %s: %s", r.Status, r.Detail) // what was searched, files, bytes, time
		}
	}
}
