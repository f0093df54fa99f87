package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testMachine = MachineInfo{CPU: "x", Cores: 2, Kernel: "6.1", OS: "Debian", Memory: "24 GB", Load: "1 1 1", Go: "go1.26"}

const brokerRun = `pkg: github.com/lever-jail/lever/internal/brokerctl
BenchmarkBrokerOverhead/keepalive-2   	    2000	    500000 ns/op	         0.3 broker-p50-ms	         0.08 direct-p50-ms	         0.22 overhead-p50-ms
BenchmarkBrokerOverhead/newconn-2   	    200	    5000000 ns/op	         2.5 broker-p50-ms	         1.9 direct-p50-ms	         0.6 overhead-p50-ms
BenchmarkBrokerOverhead/floor-keepalive-2   	    2000	    400000 ns/op	         0.2 broker-p50-ms	         0.1 direct-p50-ms	         0.1 overhead-p50-ms
`

// A document read back holds the rows it was written from: every custom metric, the
// iterations and the time per op.
func TestParseDocRoundTrip(t *testing.T) {
	r := Parse(strings.NewReader(sample))
	doc := Render(r, testMachine, time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC), "e2e,remote")
	d := ParseDoc(doc + "\n## Measured on a real Lima VM (qemu TCG, no KVM), from the e2e tests\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
	if d.Date != "2026-11-29 13:00 UTC" || d.Tags != "e2e,remote" {
		t.Errorf("date %q tags %q", d.Date, d.Tags)
	}
	var pkgs []string
	for _, s := range d.Sections {
		pkgs = append(pkgs, s.Pkg)
	}
	if diff := cmp.Diff(r.Packages, pkgs); diff != "" {
		t.Fatalf("sections (the VM section must not be one): %s", diff)
	}
	for i, s := range d.Sections {
		want := r.ByPkg[r.Packages[i]]
		if len(s.Benches()) != len(want) {
			t.Fatalf("%s: %d rows, want %d", s.Pkg, len(s.Benches()), len(want))
		}
		for j, b := range s.Benches() {
			w := want[j]
			if b.Name != w.Name || b.Iters != w.Iters {
				t.Errorf("row %s/%d: %s x%d, want %s x%d", s.Pkg, j, b.Name, b.Iters, w.Name, w.Iters)
			}
			for u, v := range w.Metrics {
				got := b.Metrics[u]
				if u == "ns/op" {
					// printed rounded to 10 ns (µs range) or 1 µs (ms range)
					if d := got - v; d > 1000 || d < -1000 {
						t.Errorf("%s %s = %v, want %v", w.Name, u, got, v)
					}
					continue
				}
				if got != v {
					t.Errorf("%s %s = %v, want %v", w.Name, u, got, v)
				}
			}
		}
	}
}

// -merge: a run of one benchmark replaces that benchmark's table and keeps the others,
// in its package and elsewhere, marked with the run they come from (once, however often
// they are kept); the header keeps saying the kept rows ran with the e2e tag; the goals
// are computed over both.
func TestMergeKeepsPackagesNotRerun(t *testing.T) {
	first := Render(Parse(strings.NewReader(sample+brokerRun)), testMachine, time.Date(2026, 12, 2, 8, 50, 0, 0, time.UTC), "e2e,remote")
	again := Parse(strings.NewReader(`pkg: github.com/lever-jail/lever/internal/egress
BenchmarkRenderVerify/ports=1-2         	      40	     50000 ns/op	        17.00 rules	   10192 B/op	     102 allocs/op
BenchmarkOther-2         	      40	     50000 ns/op
`))
	merged := Merge(ParseDoc(first), again, testMachine, time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), "")
	for _, want := range []string{
		"| ports=1 | 40 | 50µs | 10192 | 102 | 17 |",         // the rerun package's new row
		"| nft/unchanged | 20 | 127.822ms | - | - | 1 | 0 |", // a kept package's row, as it was
		"## github.com/lever-jail/lever/internal/guest\n\n### BenchmarkBringUpEgress\n\n_Kept from the run of 2026-12-02 08:50 UTC (not rerun by the last `make bench`)._\n\n| case |",
		"### BenchmarkOther\n\n| case |", // a benchmark of the rerun package that this run added
		"the rows kept from the earlier run ran with `-tags e2e,remote`: it ran as root, so the end-to-end benchmarks ran too",
		"- 3 benchmarks were not rerun (make bench -merge): their tables are kept from earlier runs, each marked with its run",
		"| 30.4 | broker overhead, kept-alive connection, p50 | BenchmarkBrokerOverhead/keepalive (overhead-p50-ms) | ≤ 0.1 ms | 0.22 ms | NOT met |",
	} {
		if !strings.Contains(merged, want) {
			t.Errorf("merged doc lacks %q:\n%s", want, merged)
		}
	}
	if strings.Contains(merged, "| ports=1 | 20 |") || strings.Contains(merged, "ports=1000/drift") {
		t.Error("the rerun benchmark's old rows survived the merge")
	}
	twice := Merge(ParseDoc(merged), again, testMachine, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC), "")
	if n := strings.Count(twice, keptNote); n != 3 {
		t.Errorf("after a second merge %d kept notes, want 3 (one per kept benchmark)", n)
	}
	if !strings.Contains(twice, keptNote+"2026-12-02 08:50 UTC") {
		t.Error("a twice-kept section lost the run it comes from")
	}
	// control: without -merge (an empty old doc) only this run's package is there
	alone := Render(again, testMachine, time.Now(), "")
	if strings.Contains(alone, "internal/guest") || strings.Contains(alone, keptNote) {
		t.Error("a plain run carried rows it did not measure")
	}
}

func TestGoals(t *testing.T) {
	byPkg := map[string][]Bench{"github.com/lever-jail/lever/internal/brokerctl": {
		{Name: "BrokerOverhead/keepalive", Metrics: map[string]float64{"overhead-p50-ms": 0.05}},
		{Name: "BrokerOverhead/newconn", Metrics: map[string]float64{"overhead-p50-ms": 1.2}},
		{Name: "BrokerOverhead/floor-keepalive", Metrics: map[string]float64{"overhead-p50-ms": 0.07}},
	}, "github.com/other/internal/brokerctl-not": {
		{Name: "BrokerOverhead/resumed", Metrics: map[string]float64{"overhead-p50-ms": 0.1}},
	}}
	goals := []Goal{
		{"30.4", "kept", "internal/brokerctl", "BrokerOverhead/keepalive", "overhead-p50-ms", 0.1},
		{"30.4", "new", "internal/brokerctl", "BrokerOverhead/newconn", "overhead-p50-ms", 1},
		{"30.4", "floor", "internal/brokerctl", "BrokerOverhead/floor-keepalive", "overhead-p50-ms", 0},
		// a package whose path only starts like the goal's is not it
		{"30.4", "resumed", "internal/brokerctl", "BrokerOverhead/resumed", "overhead-p50-ms", 1},
		{"30.3", "warm", "internal/bringup", "BringupWarm", "total-ms", 1000},
	}
	var got []string
	for _, r := range EvalGoals(goals, byPkg) {
		got = append(got, r.What+" "+r.verdict())
	}
	want := []string{"kept met", "new NOT met", "floor reference", "resumed not measured", "warm not measured"}
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
	out := PrintGoals(EvalGoals(goals, byPkg))
	if !strings.Contains(out, "BenchmarkBrokerOverhead/newconn (overhead-p50-ms)") || !strings.Contains(out, "≤ 1 ms") || !strings.Contains(out, "1.2 ms") {
		t.Errorf("printed goals:\n%s", out)
	}
}

// Every goal names a benchmark that exists in the module's sources, with its sub-case and
// metric spelled as the benchmark spells them: a renamed benchmark would otherwise leave
// its goal "not measured" for good.
func TestGoalsNameRealBenchmarks(t *testing.T) {
	vm, err := os.ReadFile(filepath.Join("..", "..", VMDoc))
	if err != nil {
		t.Fatal(err)
	}
	figures := map[string]bool{}
	for _, b := range VMFigures(string(vm)) {
		for u := range b.Metrics {
			figures[b.Name+" "+u] = true
		}
	}
	for _, g := range Goals {
		if g.Pkg == VMDoc {
			// a VM figure: the document's figures table has its row
			if !figures[g.Bench+" "+g.Metric] {
				t.Errorf("goal %s %s: %s's figures table has no %s row with metric %s", g.Item, g.What, VMDoc, g.Bench, g.Metric)
			}
			continue
		}
		files, _ := filepath.Glob(filepath.Join("..", "..", g.Pkg, "*_test.go"))
		var src strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		group, sub, _ := strings.Cut(g.Bench, "/")
		for _, want := range []string{"func Benchmark" + group + "(", `"` + sub + `"`, `"` + g.Metric + `"`} {
			if want == `""` {
				continue
			}
			if !strings.Contains(src.String(), want) {
				t.Errorf("goal %s %s: %s has no %s", g.Item, g.Bench, g.Pkg, want)
			}
		}
	}
}
