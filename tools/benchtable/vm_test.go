package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const vmDocSample = `## Measured on a real Lima VM (qemu TCG, no KVM), from the e2e tests

| figure | value |
|---|---|
| lima-boot/cold | 99 |

### Figures

| figure | metric | value | measured |
|---|---|---|---|
| lima-boot/cold | boot-s | 48.5 | 2026-12-05 13:10 UTC, load 1.1 |
| lima-restart | total-s | not measured | - |
| lima-warm-up | total-s | 3.1 | before |
| lima-warm-up | total-s | 1.2 | after |

| figure | metric | value | measured |
|---|---|---|---|
`

// The figures table is read by its header only (a table of another shape with a "figure"
// column is not it); a value that is not a number is no figure; the last row of a figure
// given twice is the one a goal sees.
func TestVMFigures(t *testing.T) {
	var got []string
	for _, b := range VMFigures(vmDocSample) {
		for u, v := range b.Metrics {
			got = append(got, b.Name+" "+u+" "+fmtNum(v))
		}
	}
	want := []string{"lima-boot/cold boot-s 48.5", "lima-warm-up total-s 3.1", "lima-warm-up total-s 1.2"}
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
	goals := []Goal{
		{"30.1", "boot", VMDoc, "lima-boot/cold", "boot-s", 30},
		{"30.2", "restart", VMDoc, "lima-restart", "total-s", 15},
		{"30.3", "warm", VMDoc, "lima-warm-up", "total-s", 1},
	}
	var verdicts []string
	for _, r := range EvalGoals(goals, map[string][]Bench{VMDoc: VMFigures(vmDocSample)}) {
		verdicts = append(verdicts, r.What+" "+r.verdict())
	}
	if d := cmp.Diff([]string{"boot NOT met", "restart not measured", "warm NOT met"}, verdicts); d != "" {
		t.Error(d)
	}
	table := RenderGoals(EvalGoals(goals, map[string][]Bench{VMDoc: VMFigures(vmDocSample)}))
	if !strings.Contains(table, "| 30.1 | boot | docs/benchmarks-vm.md: lima-boot/cold (boot-s) | ≤ 30 s | 48.5 s | NOT met |") {
		t.Errorf("goals table:\n%s", table)
	}
}

// make bench's goals table is recomputed once the VM document is appended, in place: the
// sections around it stay as they were.
func TestWithGoals(t *testing.T) {
	doc := "# Benchmarks\n\n- Date: x\n\n## Goals\n\nold table\n\n## github.com/a/b\n\n### BenchmarkX\n"
	got := WithGoals(doc, "## Goals\n\nnew table\n")
	want := "# Benchmarks\n\n- Date: x\n\n## Goals\n\nnew table\n\n## github.com/a/b\n\n### BenchmarkX\n"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if last := WithGoals("a\n## Goals\n\nold\n", "## Goals\n\nnew\n"); last != "a\n## Goals\n\nnew\n" {
		t.Errorf("goals last: %q", last)
	}
	if none := WithGoals("a\n", "## Goals\n"); none != "a\n" {
		t.Errorf("no goals section: %q", none)
	}
}
