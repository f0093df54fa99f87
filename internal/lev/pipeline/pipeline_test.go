package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/readpaths"
)

func TestPermissions(t *testing.T) {
	A, Q, D := blueprint.Allow, blueprint.Ask, blueprint.Deny
	cases := []struct {
		name      string
		user, bp  map[string]blueprint.Permission
		yolo      bool
		allow     string
		tool      string
		want      blueprint.Permission
		srcSubstr string
	}{
		{"default read allow", nil, nil, false, "", "read_file", A, "built-in default"},
		{"default shell ask", nil, nil, false, "", "shell", Q, "built-in default"},
		{"unknown tool asks", nil, nil, false, "", "mcp_thing", Q, "default"},
		{"blueprint tightens allow to deny", map[string]blueprint.Permission{"shell": A}, map[string]blueprint.Permission{"shell": D}, false, "", "shell", D, "blueprint tightens"},
		{"blueprint cannot loosen deny", map[string]blueprint.Permission{"shell": D}, map[string]blueprint.Permission{"shell": A}, false, "", "shell", D, "config.toml"},
		{"blueprint cannot loosen default ask", nil, map[string]blueprint.Permission{"shell": A}, false, "", "shell", Q, "built-in"},
		{"blueprint may pre-allow web_fetch", nil, map[string]blueprint.Permission{"web_fetch": A}, false, "", "web_fetch", A, "pre-allowed"},
		{"blueprint may pre-allow web_search", nil, map[string]blueprint.Permission{"web_search": A}, false, "", "web_search", A, "pre-allowed"},
		{"no pre-allow once the user set web_fetch", map[string]blueprint.Permission{"web_fetch": D}, map[string]blueprint.Permission{"web_fetch": A}, false, "", "web_fetch", D, "config.toml"},
		{"no pre-allow once the user set the other one", map[string]blueprint.Permission{"web_search": Q}, map[string]blueprint.Permission{"web_fetch": A}, false, "", "web_fetch", Q, "built-in"},
		{"no pre-allow for http_get", nil, map[string]blueprint.Permission{"http_get": A}, false, "", "http_get", Q, "built-in"},
		{"yolo lifts ask", nil, nil, true, "", "shell", A, "--yolo"},
		{"yolo never lifts deny", map[string]blueprint.Permission{"shell": D}, nil, true, "", "shell", D, "config.toml"},
		{"--allow lifts that tool's ask", nil, nil, false, "shell", "shell", A, "--allow shell"},
		{"--allow does not lift another tool", nil, nil, false, "shell", "http_post", Q, "built-in"},
		{"--allow never lifts a blueprint deny", nil, map[string]blueprint.Permission{"shell": D}, false, "shell", "shell", D, "blueprint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Permissions{User: tc.user, Blueprint: tc.bp, Yolo: tc.yolo, Allow: map[string]bool{tc.allow: tc.allow != ""}}
			got, src := p.For(tc.tool)
			if got != tc.want || !strings.Contains(src, tc.srcSubstr) {
				t.Fatalf("For(%s) = %s (%s), want %s (%s)", tc.tool, got, src, tc.want, tc.srcSubstr)
			}
		})
	}
}

type recGate struct {
	calls []string
	deny  bool
}

func (g *recGate) Check(_ context.Context, c *Call) (Decision, error) {
	g.calls = append(g.calls, "check:"+c.Tool)
	if g.deny {
		return Decision{Allow: false, Reason: "private data above clearance", Source: "AutoBlock"}, nil
	}
	return Decision{Allow: true, Source: "test"}, nil
}
func (g *recGate) Observe(_ context.Context, c *Call, r *Result) {
	g.calls = append(g.calls, "observe:"+c.Tool)
}

type recExec struct{ n int }

func (e *recExec) Shell(ctx context.Context, r ShellRequest) (ShellResult, error) {
	e.n++
	return ShellResult{Stdout: []byte("ran " + r.Command)}, nil
}

type answer bool

func (a answer) Ask(context.Context, Question) (bool, error) { return bool(a), nil }

// TestPipelineOrder: each step refuses before the next one runs; the gate sees only calls
// that passed the fence, and the executor only calls the gate allowed.
func TestPipelineOrder(t *testing.T) {
	e := newFenceEnv(t)
	g, x := &recGate{}, &recExec{}
	e.p.Gate, e.p.Exec = g, x
	e.stage.Tools = append(e.stage.Tools, "shell", "submit_output")
	cases := []struct {
		name     string
		tool     string
		args     map[string]any
		perms    map[string]blueprint.Permission
		asker    Asker
		gateDeny bool
		step     string
		gate     bool // gate consulted
		execd    bool
	}{
		{"not offered", "http_post", map[string]any{"url": "http://127.0.0.1/"}, nil, nil, false, StepOffer, false, false},
		{"unknown argument", "read_file", map[string]any{"path": "in.txt", "mode": "x"}, nil, nil, false, StepOffer, false, false},
		{"missing argument", "shell", map[string]any{}, nil, nil, false, StepOffer, false, false},
		{"deny", "shell", map[string]any{"command": "true"}, map[string]blueprint.Permission{"shell": blueprint.Deny}, answer(true), false, StepPermission, false, false},
		{"headless ask", "shell", map[string]any{"command": "true"}, nil, nil, false, StepPermission, false, false},
		{"ask answered no", "shell", map[string]any{"command": "true"}, nil, answer(false), false, StepPermission, false, false},
		{"ask answered yes", "shell", map[string]any{"command": "true"}, nil, answer(true), false, "", true, true},
		{"fence before gate", "read_file", map[string]any{"path": "/etc/passwd"}, nil, nil, false, StepFence, false, false},
		{"gate blocks before execution", "shell", map[string]any{"command": "true"}, map[string]blueprint.Permission{"shell": blueprint.Allow}, nil, true, StepGate, true, false},
		{"all pass", "shell", map[string]any{"command": "true"}, map[string]blueprint.Permission{"shell": blueprint.Allow}, nil, false, "", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g.calls, g.deny, x.n = nil, tc.gateDeny, 0
			e.p.Perms = &Permissions{User: tc.perms}
			e.p.Asker = tc.asker
			_, res := e.call(tc.tool, tc.args)
			step := ""
			if res.Refusal != nil {
				step = res.Refusal.Step
			}
			if step != tc.step {
				t.Fatalf("refused at %q, want %q: %s", step, tc.step, res.Content)
			}
			consulted := len(g.calls) > 0 && strings.HasPrefix(g.calls[0], "check:")
			if consulted != tc.gate {
				t.Fatalf("gate consulted = %v, want %v (%v)", consulted, tc.gate, g.calls)
			}
			if (x.n > 0) != tc.execd {
				t.Fatalf("executed = %v, want %v", x.n > 0, tc.execd)
			}
			if tc.execd && (len(g.calls) != 2 || g.calls[1] != "observe:"+tc.tool) {
				t.Fatalf("gate did not observe the result: %v", g.calls)
			}
		})
	}
}

func TestHostShellRunsInWorkdir(t *testing.T) {
	e := newFenceEnv(t)
	e.stage.Tools = []string{"shell"}
	e.p.Perms = &Permissions{Allow: map[string]bool{"shell": true}}
	e.p.Env = []string{"PATH=" + os.Getenv("PATH")}
	_, res := e.call("shell", map[string]any{"command": "pwd; cat in.txt; exit 3"})
	if !strings.Contains(res.Content, e.wd) || !strings.Contains(res.Content, "inside") || !strings.Contains(res.Content, "exit code 3") {
		t.Fatalf("%s", res.Content)
	}
}

// BenchmarkPipeline measures steps 1-4 (offer, permission, fence, gate) for a read outside
// the workdir, matched by a granted entry, with n read_paths entries declared and granted.
// The tool's own work (opening and reading the file) is excluded.
func BenchmarkPipeline(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("read_paths=%d", n), func(b *testing.B) {
			root, _ := filepath.EvalSymlinks(b.TempDir())
			wd := filepath.Join(root, "wd")
			target := filepath.Join(root, "data", "d0", "sub", "file.txt")
			mustWrite(b, target, "x")
			must(b, os.MkdirAll(wd, 0o755))
			var raws []string
			// Mixed kinds, the granted one last so a linear scan would pay for all of them.
			for i := n - 1; i >= 0; i-- {
				switch i % 3 {
				case 0:
					raws = append(raws, fmt.Sprintf("%s/data/d%d", root, i))
				case 1:
					raws = append(raws, fmt.Sprintf("glob:%s/data/g%d/**/*.txt", root, i))
				case 2:
					raws = append(raws, fmt.Sprintf("regex:%s/data/r%d/.*", root, i))
				}
			}
			entries, err := readpaths.ParseAll(raws)
			if err != nil {
				b.Fatal(err)
			}
			bp := &blueprint.Blueprint{Name: "bench", Declared: entries}
			cfg := &levconfig.Config{Grants: readpaths.Grants{Security: entries}}
			fsys, _, err := BuildFS(bp, cfg, wd, root)
			if err != nil {
				b.Fatal(err)
			}
			p := &Pipeline{FS: fsys, Perms: &Permissions{}, Gate: allowAll{}}
			st := Stage{Name: "s", Tools: []string{"read_file"}}
			tc := toolCall("read_file", `{"path":"`+target+`"}`)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, res := p.Prepare(context.Background(), st, tc)
				if res != nil || !c.Private() {
					b.Fatalf("refused: %+v", res)
				}
			}
		})
	}
}
