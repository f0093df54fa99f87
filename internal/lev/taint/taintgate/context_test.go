package taintgate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// turns builds a scripted stage "one" from its turns, in order: each a rule body (text
// and [[rule.call]] lines), then a final plain answer.
func turns(ts ...string) string {
	var b strings.Builder
	for i, t := range append(ts, `text = "done"`) {
		b.WriteString("\n[[rule]]\nstage = \"one\"\nturn = " + itoa(i+1) + "\n" + t + "\n")
	}
	return b.String()
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func call(tool, args string) string {
	return "[[rule.call]]\ntool = \"" + tool + "\"\nargs = '" + args + "'\n"
}

const (
	readSecret = `[[rule.call]]
tool = "read_file"
args = '{"path": "HOME/secret/key.txt"}'
`
	postLast = `[[rule.call]]
tool = "http_post"
args = '{"url": "SRV/x", "body": "{{last}}"}'
`
	postPlain = `[[rule.call]]
tool = "http_post"
args = '{"url": "SRV/x", "body": "status"}'
`
)

// TestContextAndTodoAreNoExfiltrationChannel: context_drop lowers the run's taint when,
// and only when, the entry dropped was the taint's only source, and the todo list cannot
// carry tainted data past the gate. Every case is a real run (engine, scripted model,
// pipeline, this gate) against a loopback sink; the positive controls show the same
// outbound call passing once nothing tainted is left, so a block is the gate's doing.
func TestContextAndTodoAreNoExfiltrationChannel(t *testing.T) {
	tools := []string{"read_file", "http_post", "context_list", "context_drop", "todo_write", "todo_read"}
	cases := []struct {
		name    string
		script  string
		hits    int          // requests reaching the sink
		source  taint.Source // the http_post's audit decision
		level   taint.Level  // the taint it was decided at
		gone    bool         // the secret is nowhere in the conversation up to the last drop
		dropped []string     // messages that must hold DroppedContent afterwards
	}{
		{"positive: drop the only source, then post",
			turns(readSecret, call("context_drop", `{"ids": ["m2"]}`), postPlain),
			1, taint.SourceWithinClearance, taint.Internal, true, []string{"m2"}},
		{"positive: no read at all",
			turns(postPlain), 1, taint.SourceWithinClearance, taint.Internal, false, nil},
		{"no drop: the read blocks the post",
			turns(readSecret, postLast), 0, taint.SourceAutoBlock, taint.Private, false, nil},
		{"the model quoted the entry in its turn: dropping the entry alone lowers nothing",
			turns(readSecret, `text = "noted the key"`+"\n"+call("context_drop", `{"ids": ["m2"]}`), postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, []string{"m2"}},
		{"dropping the quoting turn too lowers it",
			turns(readSecret, `text = "noted the key"`+"\n"+call("context_drop", `{"ids": ["m2", "m3"]}`), postPlain),
			1, taint.SourceWithinClearance, taint.Internal, true, []string{"m2", "m3"}},
		{"two sources: dropping one lowers nothing",
			turns(readSecret, readSecret, call("context_drop", `{"ids": ["m2"]}`), postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, []string{"m2"}},
		{"two sources dropped, not the turn written after the first",
			turns(readSecret, readSecret, call("context_drop", `{"ids": ["m2", "m4"]}`), postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, []string{"m2", "m4"}},
		{"two sources and the turn between them dropped",
			turns(readSecret, readSecret, call("context_drop", `{"ids": ["m2", "m3", "m4"]}`), postPlain),
			1, taint.SourceWithinClearance, taint.Internal, true, []string{"m2", "m3", "m4"}},
		{"a post in the same turn as the drop was written seeing the entry",
			turns(readSecret, call("context_drop", `{"ids": ["m2"]}`)+postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, []string{"m2"}},
		{"secret moved into the todo list, every source dropped, read back: blocked",
			turns(readSecret,
				call("todo_write", `{"todos": [{"content": "{{last}}", "status": "pending"}]}`),
				call("context_drop", `{"ids": ["m2", "m3", "m4"]}`),
				call("todo_read", `{}`),
				postLast),
			0, taint.SourceAutoBlock, taint.Private, true, []string{"m2", "m3", "m4"}},
		{"positive: a todo list written before the read reads back clean",
			turns(call("todo_write", `{"todos": [{"content": "ship it", "status": "pending"}]}`),
				readSecret,
				call("context_drop", `{"ids": ["m4"]}`),
				call("todo_read", `{}`),
				postLast),
			1, taint.SourceWithinClearance, taint.Internal, false, []string{"m4"}},
		{"the todo list rewritten while tainted stays tainted after the drop",
			turns(readSecret,
				call("todo_write", `{"todos": [{"content": "nothing secret here", "status": "pending"}]}`),
				call("context_drop", `{"ids": ["m2"]}`),
				call("todo_read", `{}`),
				postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, []string{"m2"}},
		{"the stage's input cannot be dropped, nothing is",
			turns(readSecret, call("context_drop", `{"ids": ["m2", "m0"]}`), postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, nil},
		{"an id that names nothing drops nothing",
			turns(readSecret, call("context_drop", `{"ids": ["m2", "m99"]}`), postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, nil},
		{"an id that is not one context_list printed is refused",
			turns(readSecret, call("context_drop", `{"ids": ["key=SECRET"]}`), postPlain),
			0, taint.SourceAutoBlock, taint.Private, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			o := w.run(t, runCase{tools: tools, script: strings.ReplaceAll(tc.script, "HOME", w.home)})
			hits, bodies := w.received()
			if hits != tc.hits {
				t.Fatalf("sink got %d requests, want %d: %s (run: %s %s)", hits, tc.hits, bodies, o.rec.Status, o.rec.Error)
			}
			if strings.Contains(bodies, secret) {
				t.Fatalf("the secret reached the sink: %s", bodies)
			}
			var post []taint.Record
			for _, r := range calls(o.audit) {
				if r.Tool == "http_post" {
					post = append(post, r)
				}
			}
			if len(post) != 1 || post[0].DecisionSource != tc.source || post[0].Taint != tc.level {
				t.Fatalf("http_post audit %+v, want %s at %s", post, tc.source, tc.level)
			}
			msgs := readMessages(t, o.runDir)
			for _, id := range tc.dropped {
				i := atoiID(t, id)
				if msgs[i].Content != runner.DroppedContent {
					t.Errorf("%s still holds %q", id, msgs[i].Content)
				}
			}
			if tc.gone {
				// Gone from every later turn: the conversation the model is sent (the stage's
				// messages.json) holds the secret nowhere but in a call made after the drop.
				raw, _ := json.Marshal(msgs[:lastDrop(msgs)])
				if strings.Contains(string(raw), secret) {
					t.Errorf("a dropped entry's secret is still in the conversation: %s", raw)
				}
			}
			if tc.dropped == nil {
				raw, _ := json.Marshal(msgs)
				if strings.Contains(string(raw), runner.DroppedContent) {
					t.Errorf("something was dropped by a refused drop: %s", raw)
				}
			}
		})
	}
}

// TestContextListShowsLabels: context_list names every message with its id and label,
// and what a drop changed.
func TestContextListShowsLabels(t *testing.T) {
	w := newWorld(t)
	tools := []string{"read_file", "context_list", "context_drop"}
	o := w.run(t, runCase{tools: tools, script: strings.ReplaceAll(turns(readSecret,
		call("context_list", `{}`), call("context_drop", `{"ids": ["m2"]}`), call("context_list", `{}`)), "HOME", w.home)})
	if o.rec.Status != runner.StatusCompleted {
		t.Fatalf("run %s: %s", o.rec.Status, o.rec.Error)
	}
	msgs := readMessages(t, o.runDir)
	first, second := msgs[4].Content, msgs[8].Content
	for _, want := range []string{"m0 input", "m1 assistant turn (internal)", "m2 read_file result (private)", "m3 assistant turn (public)"} {
		if !strings.Contains(first, want) {
			t.Errorf("first listing lacks %q:\n%s", want, first)
		}
	}
	if !strings.Contains(second, "m2 read_file result [dropped]") || strings.Contains(first, secret) || strings.Contains(second, secret) {
		t.Errorf("second listing:\n%s", second)
	}
	if !strings.Contains(msgs[6].Content, "the context's taint label is now internal") {
		t.Errorf("drop result: %s", msgs[6].Content)
	}
}

func readMessages(t *testing.T, runDir string) []provider.Message {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDir, "stages", "0", "messages.json"))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []provider.Message
	if err := json.Unmarshal(b, &msgs); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func atoiID(t *testing.T, id string) int {
	var i int
	if err := json.Unmarshal([]byte(id[1:]), &i); err != nil {
		t.Fatal(err)
	}
	return i
}

// lastDrop is the index just past the last context_drop result: everything the model was
// sent after the drop took effect.
func lastDrop(msgs []provider.Message) int {
	n := len(msgs)
	for i, m := range msgs {
		if m.Role == "tool" && m.Name == "context_drop" {
			n = i + 1
		}
	}
	return n
}
