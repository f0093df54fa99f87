package taintgate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// benchCalls is the length of the benchmarked run, in tool calls.
const benchCalls = 200

// benchCall is the i-th call of the benchmarked run: the coding tools a model uses most,
// in turn, each cheap, so what is measured is lev's overhead around a call, not the tool.
func benchCall(i int) (tool, args string) {
	switch i % 6 {
	case 0:
		return "read_file", `{"path": "src/f1.go"}`
	case 1:
		return "grep", `{"pattern": "func F[0-9]+", "path": "src"}`
	case 2:
		return "glob", `{"pattern": "**/*.go"}`
	case 3:
		return "edit_file", fmt.Sprintf(`{"path": "notes.txt", "old_string": "n%d.", "new_string": "n%d."}`, i-6, i)
	case 4:
		return "todo_write", fmt.Sprintf(`{"todos": [{"content": "step %d", "status": "in_progress"}]}`, i)
	}
	return "context_list", `{}`
}

// BenchmarkRun200Calls is a whole lev run of 200 tool calls, one per model turn, through
// the real engine, pipeline and this taint gate, with the scripted provider (no network,
// no model latency) and every record written as in production. Each iteration is one
// run; per-call-p50-ms is the median time from one call's record to the next (the model
// turn, the pipeline's steps, the gate, the tool and the records), pipeline-p50-ms the
// median of the pipeline's own time per call (offer to observe), from tool_calls.jsonl.
func BenchmarkRun200Calls(b *testing.B) {
	root, _ := filepath.EvalSymlinks(b.TempDir())
	home, levHome := filepath.Join(root, "home"), filepath.Join(root, "lev")
	wd := filepath.Join(home, "proj")
	for i := 0; i < 20; i++ {
		mustWriteB(b, filepath.Join(wd, "src", fmt.Sprintf("f%d.go", i)), fmt.Sprintf("package src\n\nfunc F%d() int { return %d }\n", i, i))
	}
	var sc strings.Builder
	for i := 0; i < benchCalls; i++ {
		tool, args := benchCall(i)
		fmt.Fprintf(&sc, "[[rule]]\nturn = %d\n[[rule.call]]\ntool = %q\nargs = '%s'\n\n", i+1, tool, args)
	}
	sc.WriteString("[[rule]]\ntext = \"done\"\n")
	script := filepath.Join(root, "script.toml")
	mustWriteB(b, script, sc.String())
	cfgFile := filepath.Join(levHome, "config.toml")
	mustWriteB(b, cfgFile, "[provider]\nkind = \"scripted\"\nscript = "+q(script)+"\n[security]\npolicy_file = "+q(filepath.Join(root, "policy.toml"))+"\n")
	mustWriteB(b, filepath.Join(root, "policy.toml"), "")
	mustWriteB(b, filepath.Join(levHome, "agents", "bench.toml"), `name = "bench"
version = "1.0.0"
[stages.work]
prompt = "work"
max_turns = 210
tools = ["read_file", "grep", "glob", "edit_file", "todo_write", "context_list"]
`)
	conf, err := levconfig.Load(cfgFile)
	if err != nil {
		b.Fatal(err)
	}
	eng := &runner.Engine{
		Store:       &runner.Store{Dir: filepath.Join(levHome, "runs")},
		AgentsDir:   filepath.Join(levHome, "agents"),
		Config:      func() *levconfig.Config { return conf },
		Home:        home,
		NewGate:     Factory,
		NewExecutor: hostExec,
	}
	var perCall, pipe []float64
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		mustWriteB(b, filepath.Join(wd, "notes.txt"), "n-3.\n")
		b.StartTimer()
		rec, err := eng.Start(context.Background(), runner.Spec{Agent: "bench", Workdir: wd})
		if err != nil {
			b.Fatal(err)
		}
		eng.Wait()
		b.StopTimer()
		rec, err = eng.Store.Load(rec.ID)
		if err != nil || rec.Status != runner.StatusCompleted {
			b.Fatalf("run %v: %s %s", err, rec.Status, rec.Error)
		}
		wall, own, errs := callTimes(b, filepath.Join(eng.Store.RunDir(rec.ID), "stages", "0", "tool_calls.jsonl"))
		if len(own) != benchCalls || errs != 0 {
			b.Fatalf("%d calls recorded (%d failed), want %d all succeeding", len(own), errs, benchCalls)
		}
		perCall, pipe = append(perCall, wall...), append(pipe, own...)
		b.StartTimer()
	}
	b.ReportMetric(benchCalls, "calls/op")
	b.ReportMetric(median(perCall), "per-call-p50-ms")
	b.ReportMetric(median(pipe), "pipeline-p50-ms")
}

// callTimes reads a stage's tool_calls.jsonl: the time between consecutive records, the
// pipeline's own duration of each call, and how many calls failed.
func callTimes(b *testing.B, file string) (wall, own []float64, errs int) {
	f, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var prev time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Time       time.Time `json:"time"`
			IsError    bool      `json:"is_error"`
			DurationMS float64   `json:"duration_ms"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			b.Fatal(err)
		}
		if !prev.IsZero() {
			wall = append(wall, float64(r.Time.Sub(prev).Microseconds())/1000)
		}
		prev = r.Time
		own = append(own, r.DurationMS)
		if r.IsError {
			errs++
		}
	}
	return wall, own, errs
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func mustWriteB(b *testing.B, p, s string) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		b.Fatal(err)
	}
}
