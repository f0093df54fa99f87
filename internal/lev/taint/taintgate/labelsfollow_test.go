package taintgate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint"
)

const moverBP = `name = "mover"
version = "1.0.0"
[stages.one]
prompt = "work"
tools = ["shell", "write_file", "submit_output"]
`

// moverScript runs one shell command, then submits.
func moverScript(command string) string {
	return `
[[rule]]
stage = "one"
turn = 1
[[rule.call]]
tool = "shell"
args = '{"command": ` + q(command) + `}'

[[rule]]
stage = "one"
turn = 2
[[rule.call]]
tool = "submit_output"
args = '{"output": "moved"}'
`
}

// TestLabelsFollowData (issue 27, item 2): data keeps its highest label through rename,
// copy, link and shell output, whoever moves it. Each row is three real runs (engine,
// scripted provider, pipeline, this gate, host shell): a writer stores what it read with
// write_file in notes/leak.txt (attack rows: the secret, read through a grant, so the file
// is Private; control rows: the public readme, no grant); a clean run with no grant moves
// or copies it with a shell command; another clean run, which never ran a command, may
// write a fresh file at the old path with write_file (so the path's label drops); a reader
// with no grant reads the moved data and publishes it with submit_output. Attack rows must
// be AutoBlocked at private with nothing published; controls, the same three runs on
// public data, must complete and publish what they read (so the reader's read reaches the
// data and the shell command really moved it).
func TestLabelsFollowData(t *testing.T) {
	type row struct {
		name               string
		command, fresh     string // the mover's shell command and fresh write_file path
		readTool, readArgs string
		moved              string // a path the mover's command must have created
		// public: what the control reader publishes (the readme's text, as read)
		public string
	}
	base := []row{
		{name: "renamed by shell, fresh file at the old path, read_file of the renamed copy",
			command: "mv notes/leak.txt notes/moved.txt", fresh: "notes/leak.txt",
			readTool: "read_file", readArgs: `{"path": "notes/moved.txt"}`, moved: "notes/moved.txt"},
		{name: "renamed by shell, fresh file at the old path, shell cat of the renamed copy",
			command: "mv notes/leak.txt notes/moved.txt", fresh: "notes/leak.txt",
			readTool: "shell", readArgs: `{"command": "cat notes/moved.txt"}`, moved: "notes/moved.txt"},
		{name: "moved to another directory, fresh file at the old path, list_dir there",
			command: "mkdir -p other && mv notes/leak.txt \"other/$(cat notes/leak.txt).txt\"", fresh: "notes/leak.txt",
			readTool: "list_dir", readArgs: `{"path": "other"}`, moved: "other", public: "public project notes.txt"},
		{name: "copied by shell, original removed, read_file of the copy",
			command:  "cp notes/leak.txt notes/copy.txt && rm notes/leak.txt",
			readTool: "read_file", readArgs: `{"path": "notes/copy.txt"}`, moved: "notes/copy.txt"},
		{name: "copied by shell, original rewritten, read_file of the copy",
			command: "cp notes/leak.txt notes/copy.txt", fresh: "notes/leak.txt",
			readTool: "read_file", readArgs: `{"path": "notes/copy.txt"}`, moved: "notes/copy.txt"},
		{name: "transformed by shell (base64), read_file of the result",
			command:  "base64 notes/leak.txt > notes/enc.txt && rm notes/leak.txt",
			readTool: "read_file", readArgs: `{"path": "notes/enc.txt"}`, moved: "notes/enc.txt", public: "cHVibGljIHByb2plY3Qgbm90ZXM="},
		{name: "hard-linked by shell, original path rewritten, shell cat of the link",
			command: "ln notes/leak.txt notes/link.txt && rm notes/leak.txt", fresh: "notes/leak.txt",
			readTool: "shell", readArgs: `{"command": "cat notes/link.txt"}`, moved: "notes/link.txt"},
		// The data as a symlink's target: a read of the link is refused at the fence
		// (it leaves the workdir), and the refusal names where it resolves to.
		{name: "symlink whose target spells the data, read_file refused naming it",
			command:  "ln -s \"/nonexistent/$(cat notes/leak.txt)\" notes/link.txt",
			readTool: "read_file", readArgs: `{"path": "notes/link.txt"}`, moved: "notes/link.txt"},
		{name: "copied out of the tree and back by shell, read_file of the copy",
			command:  "cp notes/leak.txt ../outside.txt && rm notes/leak.txt && cp ../outside.txt notes/back.txt",
			readTool: "read_file", readArgs: `{"path": "notes/back.txt"}`, moved: "notes/back.txt"},
	}
	write := `{"path": "notes/leak.txt", "content": "{{last}}"}`
	for _, b := range base {
		for _, attack := range []bool{true, false} {
			name := b.name
			if !attack {
				name = "control: " + name
			}
			t.Run(name, func(t *testing.T) {
				w := newWorld(t)
				agent, bp, src := "writer", writerBP, "HOME/secret/key.txt"
				if !attack {
					agent, bp, src = "clean", cleanBP, "readme.txt"
				}
				writer := w.launderRun(t, agent, bp, writerScript(src, "write_file", write), w.wd)
				if data, err := os.ReadFile(filepath.Join(w.wd, "notes/leak.txt")); err != nil || len(data) == 0 {
					t.Fatalf("writer (%s %s) did not write notes/leak.txt: %v", writer.Status, writer.Error, err)
				}
				w.launderRun(t, "mover", moverBP, moverScript(b.command), w.wd)
				if _, err := os.Lstat(filepath.Join(w.wd, b.moved)); err != nil {
					t.Fatalf("the mover's shell command did not run: %v", err)
				}
				if b.fresh != "" {
					fresher := w.launderRun(t, "fresher", strings.Replace(cleanBP, `name = "clean"`, `name = "fresher"`, 1),
						writerScript("readme.txt", "write_file", `{"path": "`+b.fresh+`", "content": "{{last}}"}`), w.wd)
					if fresher.Status != runner.StatusCompleted {
						t.Fatalf("the fresh write's run: %s %s", fresher.Status, fresher.Error)
					}
				}
				reader := w.launderRun(t, "reader", strings.Replace(readerBP, "SEEDS", "", 1), readerScript(b.readTool, b.readArgs), w.wd)
				audit, _ := taint.ReadAudit(taint.AuditPath(filepath.Join(w.levHome, "runs", reader.ID), 0))
				var sub []taint.Record
				for _, r := range calls(audit) {
					if r.Tool == "submit_output" {
						sub = append(sub, r)
					}
				}
				if len(sub) == 0 {
					t.Fatalf("reader's submit_output never reached the gate (status %s %s)", reader.Status, reader.Error)
				}
				if attack {
					for _, r := range sub {
						if r.DecisionSource != taint.SourceAutoBlock || r.Taint != taint.Private {
							t.Fatalf("reader's submit_output was not gated at private: %+v", sub)
						}
					}
					if reader.Status == runner.StatusCompleted || strings.Contains(string(reader.Result), "lvtsbx") {
						t.Fatalf("reader published: %s %s", reader.Status, reader.Result)
					}
					return
				}
				want := b.public
				if want == "" {
					want = "public project notes"
				}
				if reader.Status != runner.StatusCompleted || !strings.Contains(string(reader.Result), want) {
					t.Fatalf("control reader did not publish %q: %s %s %s (audit %+v)", want, reader.Status, reader.Result, reader.Error, sub)
				}
			})
		}
	}
}
