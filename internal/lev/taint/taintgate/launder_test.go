package taintgate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/taint/labels"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// Laundering suite (docs/lev-security.md, "Labels persist where data is stored"): data keeps the highest label it ever had
// wherever it is stored. A run that read Private data through a grant stores it (in its
// own run records, or in a workdir file via write_file); a later run with no grant reads it
// back and tries to publish it with submit_output. Each attack row has a control row of
// the same shape whose first run never touched the secret: its reader must complete
// ungated, which proves the read reaches the labels and is not blocked for another reason.

// launderRun is one real engine run with the scripted provider and this gate.
func (w *world) launderRun(t *testing.T, agent, bp, script, workdir string, extraCfg ...string) *runner.Record {
	t.Helper()
	sc := filepath.Join(w.root, agent+"-script.toml")
	must(t, os.WriteFile(sc, []byte(strings.ReplaceAll(script, "HOME", w.home)), 0o644))
	pol := filepath.Join(w.root, "policy.toml")
	must(t, os.WriteFile(pol, nil, 0o644))
	cfg := "[provider]\nkind = \"scripted\"\nscript = " + q(sc) + "\n[security]\npolicy_file = " + q(pol) +
		"\n[tool_permissions]\nshell = \"allow\"\n\"mcp__fs__*\" = \"allow\"\n\"mcp__remote__*\" = \"allow\"\n[agent_read_paths.writer]\nallow = [\"~/secret\"]\n" + strings.Join(extraCfg, "")
	cfgFile := filepath.Join(w.levHome, "config.toml")
	must(t, os.WriteFile(cfgFile, []byte(cfg), 0o644))
	conf, err := levconfig.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(w.levHome, "agents", agent+".toml"), []byte(bp), 0o644))
	eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(w.levHome, "runs")}, AgentsDir: filepath.Join(w.levHome, "agents"),
		Config: func() *levconfig.Config { return conf }, Home: w.home, Log: t.Logf, NewGate: Factory, NewExecutor: w.executor()}
	rec, err := eng.Start(context.Background(), runner.Spec{Agent: agent, Workdir: workdir})
	if err != nil {
		t.Fatalf("spawn %s: %v", agent, err)
	}
	eng.Wait()
	if rec, err = eng.Store.Load(rec.ID); err != nil {
		t.Fatal(err)
	}
	return rec
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const writerBP = `name = "writer"
version = "1.0.0"
[read_paths]
allow = ["~/secret"]
[stages.one]
prompt = "work"
tools = ["read_file", "write_file", "edit_file", "submit_output"]
`

// writerScript reads src (the secret through the grant, or the workdir's readme for the
// control) and writes what it read with the given write call ({{last}} is what it read).
func writerScript(src, tool, args string) string {
	return `
[[rule]]
stage = "one"
turn = 1
[[rule.call]]
tool = "read_file"
args = '{"path": "` + src + `"}'

[[rule]]
stage = "one"
turn = 2
[[rule.call]]
tool = "` + tool + `"
args = '` + args + `'

[[rule]]
stage = "one"
turn = 3
[[rule.call]]
tool = "submit_output"
args = '{"output": "written"}'
`
}

// readerScript makes one read call, then submits what it read.
func readerScript(tool, args string) string {
	return `
[[rule]]
stage = "one"
turn = 1
[[rule.call]]
tool = "` + tool + `"
args = '` + args + `'

[[rule]]
stage = "one"
turn = 2
[[rule.call]]
tool = "submit_output"
args = '{"output": "{{last}}"}'

[[rule]]
stage = "one"
turn = 3
text = "done"
`
}

const cleanBP = `name = "clean"
version = "1.0.0"
[stages.one]
prompt = "work"
tools = ["read_file", "write_file", "edit_file", "submit_output"]
`

const readerBP = `name = "reader"
version = "1.0.0"
SEEDS
[stages.one]
prompt = "work"
tools = ["read_file", "read_files", "list_dir", "shell", "submit_output"]
`

func TestLaunderingThroughStorage(t *testing.T) {
	const secretPath, benignPath = "HOME/secret/key.txt", "readme.txt"
	type row struct {
		name string
		// src: what the writer reads; attack rows read the secret, controls the readme.
		src string
		// write: the writer's storing call; "" skips it (the record itself is the store).
		writeTool, writeArgs string
		// between runs, as a shell command or the user would (nil: nothing).
		between func(t *testing.T, w *world, writer *runner.Record)
		// the reader: workdir "root" (holds lev's runs directory) or "" (the project).
		readerWD           string
		readTool, readArgs string // READER_RUN is replaced by the writer's run id
		seeds              string
		writerCfg          string // config.toml text for the writer's run only
		blocked            bool
		// readerGrant: the reader declares lev's runs directory in [read_paths] and the
		// config grants it; stateRefused: the read must be refused as lev's own state.
		readerGrant, stateRefused bool
		// mcp: the reader reads through an MCP server of this name, classified local (not
		// gated, as the attack needs): "fs" a stdio server serving the workdir's files,
		// "remote" an HTTP one serving its own; mcpExtra is more of its config table.
		mcp, mcpExtra string
		// mcpRead: what the MCP read must have returned (the attack's secret, the file a
		// control wrote), proving it went through; a control reader must publish it.
		mcpRead string
	}
	write := `{"path": "notes/leak.txt", "content": "{{last}}"}`
	read := `{"path": "notes/leak.txt"}`
	rows := []row{
		{name: "write_file then read_file", src: secretPath, writeTool: "write_file", writeArgs: write, readTool: "read_file", readArgs: read, blocked: true},
		{name: "control: write_file then read_file", src: benignPath, writeTool: "write_file", writeArgs: write, readTool: "read_file", readArgs: read},
		{name: "write_file then read_files", src: secretPath, writeTool: "write_file", writeArgs: write, readTool: "read_files", readArgs: `{"paths": ["notes/leak.txt"]}`, blocked: true},
		{name: "write_file then shell cat", src: secretPath, writeTool: "write_file", writeArgs: write, readTool: "shell", readArgs: `{"command": "cat notes/leak.txt"}`, blocked: true},
		{name: "control: write_file then shell cat", src: benignPath, writeTool: "write_file", writeArgs: write, readTool: "shell", readArgs: `{"command": "cat notes/leak.txt"}`},
		{name: "writer with taint tracking off still labels what it writes", src: secretPath, writeTool: "write_file", writeArgs: write,
			writerCfg: "[taint_tracking]\nenabled = false\n", readTool: "read_file", readArgs: read, blocked: true},
		{name: "renamed after writing (inode follows)", src: secretPath, writeTool: "write_file", writeArgs: write,
			between: func(t *testing.T, w *world, _ *runner.Record) {
				must(t, os.Rename(filepath.Join(w.wd, "notes/leak.txt"), filepath.Join(w.wd, "notes/moved.txt")))
			}, readTool: "read_file", readArgs: `{"path": "notes/moved.txt"}`, blocked: true},
		{name: "control: renamed after writing", src: benignPath, writeTool: "write_file", writeArgs: write,
			between: func(t *testing.T, w *world, _ *runner.Record) {
				must(t, os.Rename(filepath.Join(w.wd, "notes/leak.txt"), filepath.Join(w.wd, "notes/moved.txt")))
			}, readTool: "read_file", readArgs: `{"path": "notes/moved.txt"}`},
		{name: "secret as a file name, list_dir", src: secretPath, writeTool: "write_file", writeArgs: `{"path": "names/{{last}}.txt", "content": "x"}`,
			readTool: "list_dir", readArgs: `{"path": "names"}`, blocked: true},
		{name: "control: file name, list_dir", src: benignPath, writeTool: "write_file", writeArgs: `{"path": "names/{{last}}.txt", "content": "x"}`,
			readTool: "list_dir", readArgs: `{"path": "names"}`},
		{name: "written file as a seed", src: secretPath, writeTool: "write_file", writeArgs: write, seeds: "[[seeds]]\nfile = \"notes/leak.txt\"\n",
			readTool: "submit_output", readArgs: `{"output": "{{last}}"}`, blocked: true},
		{name: "control: written file as a seed", src: benignPath, writeTool: "write_file", writeArgs: write, seeds: "[[seeds]]\nfile = \"notes/leak.txt\"\n",
			readTool: "submit_output", readArgs: `{"output": "{{last}}"}`},
		{name: "edit_file by a clean run keeps the label", src: secretPath, writeTool: "write_file", writeArgs: write,
			between: func(t *testing.T, w *world, _ *runner.Record) {
				rec := w.launderRun(t, "editor", strings.Replace(cleanBP, `name = "clean"`, `name = "editor"`, 1),
					writerScript(benignPath, "edit_file", `{"path": "notes/leak.txt", "old_string": "SECRET", "new_string": "S"}`), w.wd)
				if rec.Status != runner.StatusCompleted {
					t.Fatalf("editor: %s %s", rec.Status, rec.Error)
				}
			}, readTool: "read_file", readArgs: read, blocked: true},
		{name: "control: write_file by a clean run replaces the content and the label", src: secretPath, writeTool: "write_file", writeArgs: write,
			between: func(t *testing.T, w *world, _ *runner.Record) {
				rec := w.launderRun(t, "editor", strings.Replace(cleanBP, `name = "clean"`, `name = "editor"`, 1),
					writerScript(benignPath, "write_file", write), w.wd)
				if rec.Status != runner.StatusCompleted {
					t.Fatalf("editor: %s %s", rec.Status, rec.Error)
				}
			}, readTool: "read_file", readArgs: read},
		// lev's run records are lev's state: without an explicit grant no tool reads them,
		// wherever they lie (here inside the reader's workdir).
		// A stdio MCP server runs in the workdir like a shell command, so its result takes
		// the highest label stored under the workdir, as shell output does.
		{name: "write_file then a stdio MCP server reads it", src: secretPath, writeTool: "write_file", writeArgs: write,
			readTool: "mcp__fs__read_text_file", readArgs: read, mcp: "fs", mcpRead: secret, blocked: true},
		{name: "control: write_file then a stdio MCP server reads it", src: benignPath, writeTool: "write_file", writeArgs: write,
			readTool: "mcp__fs__read_text_file", readArgs: read, mcp: "fs", mcpRead: "public project notes"},
		// An HTTP server (config.toml's url) is not started by lev and cannot open the
		// workdir: its result keeps the runtime's label even beside a stored Private file.
		{name: "an HTTP MCP server's result is not raised by the workdir's labels", src: secretPath, writeTool: "write_file", writeArgs: write,
			readTool: "mcp__remote__read_text_file", readArgs: read, mcp: "remote", mcpRead: "remote notes for notes/leak.txt"},
		// ...unless the user hands it the workdir as its root, which only a server that can
		// open the workdir has a use for.
		{name: "an HTTP MCP server given the workdir as its root counts as reading it", src: secretPath, writeTool: "write_file", writeArgs: write,
			readTool: "mcp__remote__read_text_file", readArgs: read, mcp: "remote", mcpExtra: "roots = true\n", mcpRead: "remote notes for notes/leak.txt", blocked: true},
		{name: "run record read without a grant is refused as lev's state", src: secretPath, readerWD: "root",
			readTool: "read_file", readArgs: `{"path": "lev/runs/READER_RUN/stages/0/tool_calls.jsonl"}`, stateRefused: true},
		{name: "control: a file beside lev's state in the same workdir reads", src: secretPath, readerWD: "root",
			readTool: "read_file", readArgs: `{"path": "home/proj/readme.txt"}`},
		// The planner of docs/lev.md ("lev's own state"): the user grants the runs directory explicitly. The record
		// reads, and what it holds is Private (its run's label, and a granted read).
		{name: "run record read through a granted [read_paths] entry is Private", src: secretPath, readerWD: "root", readerGrant: true,
			readTool: "read_file", readArgs: `{"path": "lev/runs/READER_RUN/stages/0/tool_calls.jsonl"}`, blocked: true},
		{name: "unlabelled run record through a granted entry reads Private", src: benignPath, readerWD: "root", readerGrant: true,
			between: func(t *testing.T, w *world, _ *runner.Record) {
				p := filepath.Join(w.levHome, "runs", "r-20260101-000000-abcdef", "stages", "0", "tool_calls.jsonl")
				must(t, os.MkdirAll(filepath.Dir(p), 0o700))
				must(t, os.WriteFile(p, []byte("public project notes\n"), 0o600))
			}, readTool: "read_file", readArgs: `{"path": "lev/runs/r-20260101-000000-abcdef/stages/0/tool_calls.jsonl"}`, blocked: true},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			wtool, wargs := tc.writeTool, tc.writeArgs
			if wtool == "" {
				wtool, wargs = "submit_output", `{"output": "x"}`
			}
			// The attack's writer holds the grant; the control's (same stages, no
			// [read_paths]) does not, since an agent holding a grant reads everything Private.
			agent, bp := "writer", writerBP
			if tc.src != secretPath {
				agent, bp = "clean", cleanBP
			}
			writer := w.launderRun(t, agent, bp, writerScript(tc.src, wtool, wargs), w.wd, tc.writerCfg)
			if tc.src == secretPath && tc.writerCfg == "" {
				// The writer itself could not publish (it holds the secret), but it stored it.
				if strings.Contains(string(writer.Result), secret) {
					t.Fatalf("writer published the secret: %s", writer.Result)
				}
			} else if writer.Status != runner.StatusCompleted {
				t.Fatalf("control writer: %s %s", writer.Status, writer.Error)
			}
			if tc.between != nil {
				tc.between(t, w, writer)
			}
			wd := w.wd
			if tc.readerWD == "root" {
				wd = w.root
			}
			bp = strings.Replace(readerBP, "SEEDS", tc.seeds, 1)
			var readerCfg []string
			if tc.readerGrant {
				runs := q(filepath.Join(w.levHome, "runs"))
				bp = strings.Replace(bp, "[stages.one]", "[read_paths]\nallow = ["+runs+"]\n[stages.one]", 1)
				readerCfg = append(readerCfg, "[agent_read_paths.reader]\nallow = ["+runs+"]\n")
			}
			var mcpLog string
			if tc.mcp != "" {
				t.Setenv("LEV_BENCH_SOCKET", "")
				w.exec = mcpExec
				mcpLog = logFile(t, tc.mcp)
				table := stdioServer(tc.mcp, "fs", mcpLog, w.wd, "classification = \"local\"\n"+tc.mcpExtra)
				if tc.mcp == "remote" {
					table = httpServer(t, tc.mcp, "remote", mcpLog, "classification = \"local\"\n"+tc.mcpExtra)
				}
				readerCfg = append(readerCfg, table)
				bp = strings.Replace(bp, "[stages.one]", "[mcp]\nservers = [\""+tc.mcp+"\"]\n[stages.one]", 1)
				bp = strings.Replace(bp, `"submit_output"]`, `"submit_output", "mcp__`+tc.mcp+`__*"]`, 1)
			}
			reader := w.launderRun(t, "reader", bp, readerScript(tc.readTool, strings.ReplaceAll(tc.readArgs, "READER_RUN", writer.ID)), wd, readerCfg...)
			if tc.mcp != "" {
				// Attack and control alike: the read reached the server and returned the
				// file (a refused or failed read would keep the secret out by itself).
				if got := received(t, mcpLog); !strings.Contains(got, "read_text_file notes/leak.txt") {
					t.Fatalf("the MCP server never got the read (status %s %s): %q", reader.Status, reader.Error, got)
				}
				var got *toolCallLine
				for _, l := range toolCalls(t, filepath.Join(w.levHome, "runs", reader.ID)) {
					if l.Tool == tc.readTool {
						got = &l
					}
				}
				if got == nil || got.IsError || got.Refusal != nil || !strings.Contains(got.Result, tc.mcpRead) {
					t.Fatalf("the MCP read did not return %q: %+v", tc.mcpRead, got)
				}
			}
			if tc.stateRefused {
				data, err := os.ReadFile(filepath.Join(w.levHome, "runs", reader.ID, "stages", "0", "tool_calls.jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(data), `"code":"lev-state"`) {
					t.Fatalf("reader's read of the record was not refused as lev's state:\n%s", data)
				}
				if strings.Contains(string(reader.Result), "lvtsbx") || strings.Contains(string(reader.Result), "SECRET") {
					t.Fatalf("reader published: %s", reader.Result)
				}
				return
			}
			audit, _ := taint.ReadAudit(taint.AuditPath(filepath.Join(w.levHome, "runs", reader.ID), 0))
			var sub []taint.Record
			for _, r := range calls(audit) {
				if r.Tool == "submit_output" {
					sub = append(sub, r)
				}
			}
			if tc.blocked {
				if len(sub) == 0 {
					t.Fatalf("reader's submit_output never reached the gate (status %s %s)", reader.Status, reader.Error)
				}
				for _, r := range sub {
					if r.DecisionSource != taint.SourceAutoBlock || r.Taint != taint.Private {
						t.Fatalf("reader's submit_output was not gated at private: %+v (status %s %s)", sub, reader.Status, reader.Error)
					}
				}
				if reader.Status == runner.StatusCompleted || strings.Contains(string(reader.Result), "SECRET") || strings.Contains(string(reader.Result), "lvtsbx") {
					t.Fatalf("reader published: %s %s", reader.Status, reader.Result)
				}
				return
			}
			if reader.Status != runner.StatusCompleted || len(reader.Result) == 0 {
				t.Fatalf("control reader did not complete: %s %s (audit %+v)", reader.Status, reader.Error, sub)
			}
			for _, r := range sub {
				if r.Decision != "allow" {
					t.Fatalf("control reader gated: %+v", r)
				}
			}
			if tc.mcpRead != "" && !strings.Contains(string(reader.Result), tc.mcpRead) {
				t.Fatalf("control reader's result lacks %q: %s", tc.mcpRead, reader.Result)
			}
			if tc.mcp == "" && strings.Contains(string(reader.Result), "lvtsbx") {
				t.Fatalf("control leaked the secret: %s", reader.Result)
			}
		})
	}
}

// TestSameRunAfterEviction: a run that wrote Private data to a file and then evicted the
// read that brought it in (its taint falls back to Internal) gets the label back when it
// reads the file again. Control: a file it did not write stays Internal, and the same
// outbound call passes.
func TestSameRunAfterEviction(t *testing.T) {
	post := `{"url": "http://127.0.0.1:9/collect", "body": "x"}`
	for _, tc := range []struct {
		name    string
		written bool
		allowed bool
	}{
		{name: "reads back the file it wrote", written: true, allowed: false},
		{name: "control: reads a file it did not write", written: false, allowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "", "", "", false)
			dir := t.TempDir()
			h.g.env.Labels = &labels.Store{Path: filepath.Join(dir, "labels.json"), Runs: filepath.Dir(h.runDir)}
			id := h.readPrivate()
			f := filepath.Join(dir, "copy.txt")
			wc := &pipeline.Call{ID: "w1", Tool: "write_file", Writes: []workfs.Access{{Path: "copy.txt", Real: f}}}
			if tc.written {
				if d, _ := h.g.Check(context.Background(), wc); !d.Allow {
					t.Fatalf("write_file gated: %+v", d)
				}
			}
			must(t, os.WriteFile(f, []byte(secret), 0o600)) // what write_file does
			if tc.written {
				h.g.Observe(context.Background(), wc, &pipeline.Result{Content: "wrote"})
			}
			if !h.g.Evict(id) || h.g.Level() != taint.Internal {
				t.Fatalf("after eviction level %s", h.g.Level())
			}
			rc := &pipeline.Call{ID: "r9", Tool: "read_file", Reads: []workfs.Access{{Path: "copy.txt", Real: f}}}
			h.g.Observe(context.Background(), rc, &pipeline.Result{Content: secret})
			if d := h.call("http_post", post); d.Allow != tc.allowed {
				t.Fatalf("http_post after reading the file back: %+v (level %s)", d, h.g.Level())
			}
			// The run's high-water mark (its records' label) never falls.
			if h.g.HighWater() != taint.Private {
				t.Fatalf("high water %s", h.g.HighWater())
			}
		})
	}
}
