package main

import (
	"bufio"
	"math"
	"strconv"
	"strings"
)

// VMDoc is where the goals that no Go benchmark can measure take their figures from: the
// hand-kept VM document (docs/benchmarks-vm.md, appended to docs/benchmarks.md), whose
// figures come from the e2e tests' logs on a real Lima VM. A goal filed under it names a
// row of that document's figures table instead of a benchmark.
const VMDoc = "docs/benchmarks-vm.md"

// vmFiguresHeader is the header of the figures table in the VM document: one row a figure,
// its metric (the unit a goal names), its value, and when and at what load it was measured.
var vmFiguresHeader = []string{"figure", "metric", "value", "measured"}

// VMFigures reads the figures table of the VM document (the table whose header is
// vmFiguresHeader) as benchmark rows: the figure is the name, the metric its one unit.
// Rows whose value is not a number are skipped; a figure given twice keeps its last row.
func VMFigures(md string) []Bench {
	var out []Bench
	in := false
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		cells := tableCells(line)
		switch {
		case !in:
			in = equalCells(cells, vmFiguresHeader)
		case strings.HasPrefix(line, "|---"):
		case len(cells) == len(vmFiguresHeader):
			v, err := strconv.ParseFloat(cells[2], 64)
			if err != nil || math.IsNaN(v) {
				continue
			}
			out = append(out, Bench{Name: cells[0], Iters: 1, Metrics: map[string]float64{cells[1]: v}, Order: []string{cells[1]}})
		}
	}
	return out
}

func equalCells(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// WithGoals is doc with its goals section (from "## Goals" to the next level-2 heading)
// replaced by table; a doc without one is returned as it is.
func WithGoals(doc, table string) string {
	start := strings.Index(doc, "## Goals\n")
	if start < 0 {
		return doc
	}
	end := strings.Index(doc[start+1:], "\n## ")
	if end < 0 {
		return doc[:start] + table
	}
	return doc[:start] + table + doc[start+1+end:]
}
