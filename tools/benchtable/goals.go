package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Goal is a figure an issue asks for: a benchmark's metric at or below Max. A Goal with
// Max 0 is a reference figure (a floor the goal is measured against), shown without a
// verdict.
type Goal struct {
	Item   string // the issue item, e.g. "30.4"
	What   string
	Pkg    string // the package path's suffix, or VMDoc for a figure of the VM document
	Bench  string // the benchmark's name without its Benchmark prefix, sub-benchmarks included (VMDoc: the figure)
	Metric string // a unit the benchmark reports
	Max    float64
}

// Goals are the goals `make bench` prints and docs/benchmarks.md opens with. A goal whose
// benchmark did not run (not root, so no e2e benchmarks; a -pkgs subset without -merge)
// shows as not measured.
var Goals = []Goal{
	{"30.1", "Lima guest boot under TCG, cold (Starting QEMU to READY; the shipped image)", VMDoc, "lima-boot/cold", "boot-s", 30},
	{"30.1", "floor: a Lima guest boot under TCG with kernel and systemd only", VMDoc, "lima-boot/floor", "boot-s", 0},
	{"30.2", "restart on Lima under TCG (`lever stop`, then `lever up`)", VMDoc, "lima-restart", "total-s", 15},
	{"30.3", "warm `lever up` on Lima under TCG (one guest call)", VMDoc, "lima-warm-up", "total-s", 1},
	{"30.3", "warm `lever up` on the netns substrate: wall time (Lima under TCG: see the VM table at the end)", "internal/bringup", "BringupWarm", "total-ms", 1000},
	{"30.3", "warm `lever up`: guest calls", "internal/bringup", "BringupWarm", "guest-calls/op", 1},
	{"30.4", "broker overhead, kept-alive connection, p50", "internal/brokerctl", "BrokerOverhead/keepalive", "overhead-p50-ms", 0.1},
	{"30.4", "floor: a bare TLS proxy's overhead on the same legs, p50", "internal/brokerctl", "BrokerOverhead/floor-keepalive", "overhead-p50-ms", 0},
	{"30.4", "broker overhead, new connection (full mTLS handshake), p50", "internal/brokerctl", "BrokerOverhead/newconn", "overhead-p50-ms", 1},
	{"30.4", "broker overhead, new connection resuming its TLS session, p50", "internal/brokerctl", "BrokerOverhead/resumed", "overhead-p50-ms", 1},
	{"30.4", "a client writing header and body in two packets, through the broker, p50 (was ~44 ms: delayed ACK)", "internal/brokerctl", "BrokerOverhead/twopacket", "broker-p50-ms", 1},
}

// GoalResult is a goal with what this document measured for it.
type GoalResult struct {
	Goal
	Value    float64
	Measured bool
}

// Met says whether the measured value meets the goal (false when not measured or a
// reference figure).
func (g GoalResult) Met() bool { return g.Measured && g.Max > 0 && g.Value <= g.Max }

func (g GoalResult) verdict() string {
	switch {
	case !g.Measured:
		return "not measured"
	case g.Max == 0:
		return "reference"
	case g.Met():
		return "met"
	}
	return "NOT met"
}

// unit is the metric's unit as a reader says it ("ms" for total-ms and p50-ms).
func (g Goal) unit() string {
	switch {
	case strings.HasSuffix(g.Metric, "-ms"):
		return "ms"
	case strings.HasSuffix(g.Metric, "-s"):
		return "s"
	case strings.HasSuffix(g.Metric, "/op"):
		return strings.TrimSuffix(g.Metric, "/op")
	}
	return g.Metric
}

func (g Goal) goalText() string {
	if g.Max == 0 {
		return "-"
	}
	return "≤ " + fmtNum(g.Max) + " " + g.unit()
}

// source names where the figure comes from: the benchmark and its metric, or the VM
// document's figure.
func (g Goal) source() string {
	if g.Pkg == VMDoc {
		return VMDoc + ": " + g.Bench + " (" + g.Metric + ")"
	}
	return "Benchmark" + g.Bench + " (" + g.Metric + ")"
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// EvalGoals looks every goal up in byPkg (package path -> results).
func EvalGoals(goals []Goal, byPkg map[string][]Bench) []GoalResult {
	out := make([]GoalResult, 0, len(goals))
	for _, g := range goals {
		r := GoalResult{Goal: g}
		for pkg, bs := range byPkg {
			if !strings.HasSuffix(pkg, "/"+g.Pkg) && pkg != g.Pkg {
				continue
			}
			for _, b := range bs {
				if v, ok := b.Metrics[g.Metric]; ok && b.Name == g.Bench {
					r.Value, r.Measured = v, true
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// RenderGoals is the goals table in markdown.
func RenderGoals(rs []GoalResult) string {
	var s strings.Builder
	s.WriteString("## Goals\n\nEach goal next to what this run measured (a reference row is the floor a goal is\nmeasured against; `make bench` prints the same table).\n\n")
	s.WriteString("| issue | what | benchmark or VM figure (metric) | goal | measured | |\n|---|---|---|---|---|---|\n")
	for _, r := range rs {
		val := "-"
		if r.Measured {
			val = fmtNum(r.Value) + " " + r.unit()
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s |\n", r.Item, r.What, r.source(), r.goalText(), val, r.verdict())
	}
	return s.String()
}

// PrintGoals is the goals table as aligned text, for make bench's output.
func PrintGoals(rs []GoalResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ISSUE\tBENCHMARK OR VM FIGURE (METRIC)\tGOAL\tMEASURED\t")
	for _, r := range rs {
		val := "-"
		if r.Measured {
			val = fmtNum(r.Value) + " " + r.unit()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Item, r.source(), r.goalText(), val, r.verdict())
	}
	w.Flush()
	return b.String()
}
