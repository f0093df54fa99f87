//go:build e2e

package sandbox

import (
	"context"
	"testing"
	"time"
)

// BenchmarkShellCall times one `true` through each kind in the same run, as the rootless
// test user: an exec in the warm container, a fresh `run --rm` per call, a namespace, and
// the host. ns/op is one round of all four; the per-kind figures and ratios are metrics.
func BenchmarkShellCall(b *testing.B) {
	f := podmanFixture(b)
	wd := f.workdir(b)
	m := NewManager(f.rootlessOptions())
	defer m.Close()
	ctx := context.Background()
	cfg := Config{Kind: "container", Image: f.image, Network: bp(false)}
	warm, err := m.Executor(ctx, cfg, wd)
	if err != nil {
		b.Fatal(err)
	}
	spec, err := m.SpecFor(cfg, wd)
	if err != nil {
		b.Fatal(err)
	}
	ns, err := m.Executor(ctx, Config{Kind: "namespace", Network: bp(false)}, wd)
	if err != nil {
		b.Fatal(err)
	}
	host, _ := m.Executor(ctx, Config{Kind: "none"}, wd)
	fresh := func() error {
		argv := spec.RunArgv("", false, "sh", "-c", "true")
		res, err := m.r.run(ctx, argv, Command{})
		if err == nil && res.ExitCode != 0 {
			b.Fatalf("fresh run: exit %d %s", res.ExitCode, res.Stderr)
		}
		return err
	}
	call := func(ex Executor) error {
		res, err := ex.Run(ctx, Command{Script: "true", Dir: wd})
		if err == nil && res.ExitCode != 0 {
			b.Fatalf("%s: exit %d %s", ex.Kind(), res.ExitCode, res.Stderr)
		}
		return err
	}
	// One warm-up of each, so image and binaries are in the page cache for all four.
	call(warm)
	fresh()
	call(ns)
	call(host)
	var tWarm, tFresh, tNS, tHost time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, step := range []struct {
			d  *time.Duration
			fn func() error
		}{
			{&tWarm, func() error { return call(warm) }},
			{&tFresh, fresh},
			{&tNS, func() error { return call(ns) }},
			{&tHost, func() error { return call(host) }},
		} {
			s := time.Now()
			if err := step.fn(); err != nil {
				b.Fatal(err)
			}
			*step.d += time.Since(s)
		}
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(tWarm), "warm-exec-ms")
	b.ReportMetric(ms(tFresh), "fresh-run-ms")
	b.ReportMetric(ms(tNS), "namespace-ms")
	b.ReportMetric(ms(tHost), "none-ms")
	b.ReportMetric(float64(tFresh)/float64(tWarm), "fresh/warm")
	b.ReportMetric(float64(tWarm)/float64(tNS), "warm/namespace")
	b.ReportMetric(float64(tWarm)/float64(tHost), "warm/none")
	b.ReportMetric(float64(tNS)/float64(tHost), "namespace/none")
}
