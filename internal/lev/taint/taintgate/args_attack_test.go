package taintgate

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// countingServer is a loopback HTTP server on ip that counts requests.
func countingServer(t *testing.T, ip string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n.Add(1)
		io.WriteString(w, "ok")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

// toolCallLine is the part of a tool_calls.jsonl line these tests read.
type toolCallLine struct {
	ID      string          `json:"id"`
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"`
	Targets []string        `json:"targets"`
	Refusal *struct {
		Step, Code, Message string
	} `json:"refusal"`
	IsError bool   `json:"is_error"`
	Result  string `json:"result"`
}

func toolCalls(t *testing.T, runDir string) []toolCallLine {
	t.Helper()
	f, err := os.Open(filepath.Join(runDir, "stages", "0", "tool_calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []toolCallLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l toolCallLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestArgumentSpellingsCannotSplitGateFromTool: a real run (engine, scripted model, the
// pipeline, this gate, real loopback servers) reads Private data, then makes an outbound
// call whose arguments name one host for a case-sensitive reader and another for a
// case-insensitive one. The policy allows carrying Private data to ALLOWED (127.0.0.1)
// only. Every ambiguous spelling is refused at the offer step as bad arguments naming the
// key, and neither server receives anything. Positive controls in the same table: the
// plain call to OTHER reaches the gate and is blocked there; the plain call to ALLOWED
// (and the same key spelled with a JSON escape) reaches ALLOWED.
func TestArgumentSpellingsCannotSplitGateFromTool(t *testing.T) {
	allowed, allowedHits := countingServer(t, "127.0.0.1")
	other, otherHits := countingServer(t, "127.0.0.2")
	type outcome int
	const (
		badArgs        outcome = iota // refused at offer, neither server hit
		gateBlocks                    // reached the gate, blocked; neither server hit
		reachesAllowed                // ran, ALLOWED got exactly one request
	)
	cases := []struct {
		name, args string
		want       outcome
		key        string // the key the refusal must name
	}{
		{"url and URL", `{"url": "ALLOWED/x", "URL": "OTHER/x"}`, badArgs, `"url" and "URL"`},
		{"URL and url", `{"URL": "OTHER/x", "url": "ALLOWED/x"}`, badArgs, `unknown argument "URL"`},
		{"Url alone", `{"Url": "OTHER/x"}`, badArgs, `unknown argument "Url"`},
		{"URL alone", `{"URL": "OTHER/x"}`, badArgs, `unknown argument "URL"`},
		{"exact duplicate, other last", `{"url": "ALLOWED/x", "url": "OTHER/x"}`, badArgs, `argument "url" appears twice`},
		{"exact duplicate, other first", `{"url": "OTHER/x", "url": "ALLOWED/x"}`, badArgs, `argument "url" appears twice`},
		{"escaped upper-case duplicate", `{"url": "ALLOWED/x", "\u0055RL": "OTHER/x"}`, badArgs, `"url" and "URL"`},
		{"escaped exact duplicate", `{"url": "ALLOWED/x", "\u0075rl": "OTHER/x"}`, badArgs, `argument "url" appears twice`},
		{"escaped mixed-case duplicate", `{"url": "ALLOWED/x", "\u0055\u0072L": "OTHER/x"}`, badArgs, `"url" and "UrL"`},
		// (Trailing data cannot be scripted: the scripted model sends valid JSON only;
		// strictjson's own table covers it.)
		{"wrong type", `{"url": ["OTHER/x"]}`, badArgs, `argument "url": want a string, got a JSON array`},
		// Positive controls: the payload reaches the gate and the tool.
		{"control: plain url to OTHER is blocked by the gate", `{"url": "OTHER/x"}`, gateBlocks, ""},
		{"control: escaped key that is url, to OTHER, blocked by the gate", `{"\u0075rl": "OTHER/x"}`, gateBlocks, ""},
		{"control: plain url to ALLOWED runs", `{"url": "ALLOWED/x"}`, reachesAllowed, ""},
		{"control: escaped key that is url, to ALLOWED, runs", `{"\u0075rl": "ALLOWED/x"}`, reachesAllowed, ""},
	}
	tools := []string{"http_get", "http_post", "web_fetch"}
	w := newWorld(t)
	for _, tool := range tools {
		for _, c := range cases {
			t.Run(tool+"/"+c.name, func(t *testing.T) {
				allowedHits.Store(0)
				otherHits.Store(0)
				args := strings.NewReplacer("ALLOWED", allowed.URL, "OTHER", other.URL).Replace(c.args)
				sc := strings.ReplaceAll(script("one", tool, args), "HOME", w.home)
				pol := "[[allow]]\ntool = \"" + tool + "\"\ntarget = \"127.0.0.1\"\nmax_sensitivity = \"private\"\n"
				o := w.run(t, runCase{tools: []string{"read_file", tool}, script: sc, policy: pol})
				lines := toolCalls(t, o.runDir)
				if len(lines) < 2 || lines[0].Tool != "read_file" || lines[0].IsError {
					t.Fatalf("the private read did not happen first: %+v", lines)
				}
				call := lines[1]
				if call.Tool != tool {
					t.Fatalf("second call is %s", call.Tool)
				}
				a, o2 := allowedHits.Load(), otherHits.Load()
				switch c.want {
				case badArgs:
					if call.Refusal == nil || call.Refusal.Step != "offer" || call.Refusal.Code != "bad-arguments" || !strings.Contains(call.Refusal.Message, c.key) {
						t.Fatalf("want a bad-arguments refusal naming %s, got %+v", c.key, call.Refusal)
					}
					// The record keeps the raw bytes as a string: never as decoded arguments.
					var s string
					if json.Unmarshal(call.Args, &s) != nil || s != args {
						t.Errorf("record args %s, want the raw bytes as a string", call.Args)
					}
					if len(calls(o.audit)) != 0 {
						t.Errorf("a call refused at offer reached the gate: %+v", o.audit)
					}
				case gateBlocks:
					if call.Refusal == nil || call.Refusal.Step != "gate" {
						t.Fatalf("want the gate to block, got %+v", call.Refusal)
					}
					if au := calls(o.audit); len(au) != 1 || au[0].Target != "127.0.0.2" || au[0].DecisionSource != taint.SourceAutoBlock {
						t.Fatalf("audit %+v, want one AutoBlock for 127.0.0.2", au)
					}
				case reachesAllowed:
					if call.Refusal != nil || call.IsError || a != 1 {
						t.Fatalf("allowed call: refusal %+v, error %v, allowed hits %d: %s", call.Refusal, call.IsError, a, call.Result)
					}
					if au := calls(o.audit); len(au) != 1 || au[0].Target != "127.0.0.1" || au[0].Decision != "allow" {
						t.Fatalf("audit %+v, want one allow for 127.0.0.1", au)
					}
					// The record shows the decoded arguments, the ones that ran.
					var rec map[string]any
					if json.Unmarshal(call.Args, &rec) != nil || rec["url"] != allowed.URL+"/x" {
						t.Errorf("record args %s", call.Args)
					}
				}
				if o2 != 0 {
					t.Fatalf("OTHER received %d request(s)", o2)
				}
				if c.want != reachesAllowed && a != 0 {
					t.Fatalf("ALLOWED received %d request(s) from a refused call", a)
				}
			})
		}
	}
}

// TestShellAndPathArgumentSpellings: the same class for shell (its target is the command)
// and the path tools (the fence reads the path). A second spelling of the key never
// reaches the tool; the plain calls are the positive controls.
func TestShellAndPathArgumentSpellings(t *testing.T) {
	w := newWorld(t)
	shellPol := "[[allow]]\ntool = \"shell\"\ntarget = \"echo ok\"\nmax_sensitivity = \"private\"\n"
	cases := []struct {
		name, tool, args, pol string
		noGrant               bool
		refusal               string // "offer" | "gate" | "fence" | "" (ran)
		key                   string
		check                 func(t *testing.T, l toolCallLine)
	}{
		{name: "shell command and COMMAND", tool: "shell", pol: shellPol,
			args: `{"command": "echo ok", "COMMAND": "touch pwned"}`, refusal: "offer", key: `"command" and "COMMAND"`},
		{name: "shell Command alone", tool: "shell", pol: shellPol,
			args: `{"Command": "touch pwned"}`, refusal: "offer", key: `unknown argument "Command"`},
		{name: "shell exact duplicate", tool: "shell", pol: shellPol,
			args: `{"command": "echo ok", "command": "touch pwned"}`, refusal: "offer", key: `argument "command" appears twice`},
		{name: "shell timeout with a long s", tool: "shell", pol: shellPol,
			args: `{"command": "echo ok", "timeout_\u017feconds": 1}`, refusal: "offer", key: "unknown argument \"timeout_\u017feconds\""},
		{name: "control: shell allowed command runs", tool: "shell", pol: shellPol,
			args: `{"command": "echo ok"}`, refusal: ""},
		{name: "control: shell other command reaches the gate", tool: "shell", pol: shellPol,
			args: `{"command": "touch pwned"}`, refusal: "gate"},
		{name: "read_file path and PATH", tool: "read_file", noGrant: true,
			args: `{"path": "readme.txt", "PATH": "HOME/secret/key.txt"}`, refusal: "offer", key: `"path" and "PATH"`},
		{name: "read_file Path alone", tool: "read_file", noGrant: true,
			args: `{"Path": "HOME/secret/key.txt"}`, refusal: "offer", key: `unknown argument "Path"`},
		{name: "read_file duplicate path", tool: "read_file", noGrant: true,
			args: `{"path": "readme.txt", "path": "HOME/secret/key.txt"}`, refusal: "offer", key: `argument "path" appears twice`},
		{name: "read_file max_bytes with a Kelvin sign", tool: "read_file", noGrant: true,
			args: `{"path": "readme.txt", "max_\u212aytes": 1}`, refusal: "offer", key: "unknown argument"},
		{name: "read_files paths with a long s", tool: "read_files", noGrant: true,
			args: `{"paths": ["readme.txt"], "path\u017f": ["HOME/secret/key.txt"]}`, refusal: "offer", key: "\"paths\" and \"path\u017f\""},
		{name: "control: read_file inside runs", tool: "read_file", noGrant: true,
			args: `{"path": "readme.txt"}`, refusal: "",
			check: func(t *testing.T, l toolCallLine) {
				if !strings.Contains(l.Result, "public project notes") {
					t.Errorf("result %q", l.Result)
				}
			}},
		{name: "control: read_file outside reaches the fence", tool: "read_file", noGrant: true,
			args: `{"path": "HOME/secret/key.txt"}`, refusal: "fence"},
		{name: "write_file path and Path", tool: "write_file",
			args: `{"path": "ok.txt", "Path": "pwned", "content": "x"}`, refusal: "offer", key: `"path" and "Path"`},
		{name: "control: write_file runs", tool: "write_file",
			args: `{"path": "ok.txt", "content": "x"}`, refusal: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(filepath.Join(w.wd, "pwned"))
			args := strings.ReplaceAll(c.args, "HOME", w.home)
			// Turn 1 here is the call under test itself (no private read first, so a path
			// tool's result is what the call read).
			sc := `
[[rule]]
stage = "one"
turn = 1
[[rule.call]]
tool = "` + c.tool + `"
args = '` + args + `'

[[rule]]
stage = "one"
turn = 2
text = "done"
`
			if c.tool == "shell" {
				// Shell's gate case needs Private data in context: read it first.
				sc = strings.ReplaceAll(script("one", c.tool, args), "HOME", w.home)
			}
			tools := []string{"read_file"}
			if c.tool != "read_file" {
				tools = append(tools, c.tool)
			}
			o := w.run(t, runCase{tools: tools, script: sc, policy: c.pol, noGrant: c.noGrant})
			var l toolCallLine
			for _, x := range toolCalls(t, o.runDir) {
				if x.Tool == c.tool && !(c.tool == "read_file" && strings.Contains(x.Result, secret)) {
					l = x
				}
			}
			if l.Tool != c.tool {
				t.Fatalf("no %s call recorded", c.tool)
			}
			switch c.refusal {
			case "":
				if l.Refusal != nil || l.IsError {
					t.Fatalf("control call refused: %+v %s", l.Refusal, l.Result)
				}
			default:
				if l.Refusal == nil || l.Refusal.Step != c.refusal || !strings.Contains(l.Refusal.Message, c.key) {
					t.Fatalf("want a %s refusal naming %s, got %+v", c.refusal, c.key, l.Refusal)
				}
			}
			if c.check != nil {
				c.check(t, l)
			}
			if _, err := os.Stat(filepath.Join(w.wd, "pwned")); err == nil {
				t.Fatal("the second spelling ran")
			}
		})
	}
}
