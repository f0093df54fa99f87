package pipeline

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/provider"
)

type fenceEnv struct {
	home, wd string
	p        *Pipeline
	stage    Stage
}

const fenceBlueprint = `
name = "cto"
version = "1.0.0"
[read_paths]
allow = ["~/docs", "glob:~/design/**", "../shared", "regex:~/runs", "glob:../notes/*.md", "~/linkdocs"]
[stages.work]
tools = ["read_file", "read_files", "list_dir", "write_file", "edit_file"]
`

const fenceConfig = `
[agent_read_paths.cto]
allow = ["~/docs", "../shared", "regex:~/runs", "glob:../notes/*.md", "~/linkdocs"]
[security]
read_paths = ["~/private"]
`

func mustWrite(t testing.TB, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newFenceEnv(t testing.TB) *fenceEnv {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	wd := filepath.Join(home, "proj", "wd")
	files := map[string]string{
		"home/.ssh/id_rsa":          "SECRET-KEY",
		"home/docs/readme.md":       "granted docs",
		"home/docs-secret/x":        "prefix neighbour",
		"home/design/a.md":          "declared, not granted",
		"home/private/p.txt":        "granted in config, never declared",
		"home/runs":                 "exact regex target",
		"home/runs-other":           "regex neighbour",
		"home/proj/shared/s.txt":    "relative grant",
		"home/proj/notes/n.md":      "relative glob grant",
		"home/proj/notes/deep/n.md": "one component too deep",
		"home/proj/wd/in.txt":       "inside",
		"home/proj/wd/sub/keep.txt": "inside",
	}
	for p, c := range files {
		mustWrite(t, filepath.Join(root, p), c)
	}
	// A symlink planted inside a granted directory, pointing at the secret.
	must(t, os.Symlink(filepath.Join(home, ".ssh", "id_rsa"), filepath.Join(home, "docs", "evil")))
	// A granted entry that is itself a symlink to somewhere else: the real path is
	// matched, so the link's target is not granted by the link's name.
	must(t, os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(home, "linkdocs")))
	// Symlinked workdir components: a directory link out, and a link into a granted dir.
	must(t, os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(wd, "link")))
	must(t, os.Symlink(filepath.Join(home, "docs"), filepath.Join(wd, "docslink")))
	bp, err := blueprint.Parse("cto.toml", []byte(fenceBlueprint), Known)
	if err != nil {
		t.Fatal(err)
	}
	bp.Installed = "cto" // installed as agents/cto.toml: [agent_read_paths.cto] applies
	cfg, err := levconfig.Parse("config.toml", []byte(fenceConfig))
	if err != nil {
		t.Fatal(err)
	}
	fsys, _, err := BuildFS(bp, cfg, wd, home)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{FS: fsys, Perms: &Permissions{User: cfg.Perms, Blueprint: bp.Perms}, Gate: allowAll{}, Exec: HostExecutor{}}
	return &fenceEnv{home: home, wd: wd, p: p, stage: Stage{Name: "work", Tools: bp.Order[0].Tools}}
}

// allowAll is a test gate that passes every call (production has no such gate: a
// pipeline without a gate refuses everything).
type allowAll struct{}

func (allowAll) Check(context.Context, *Call) (Decision, error) {
	return Decision{Allow: true, Source: "test-allow-all"}, nil
}
func (allowAll) Observe(context.Context, *Call, *Result) {}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *fenceEnv) call(tool string, args map[string]any) (*Call, *Result) {
	raw, _ := json.Marshal(args)
	return e.p.Handle(context.Background(), e.stage, provider.ToolCall{ID: "t", Name: tool, Args: raw})
}

// TestFenceAttacks: every case is an attempt to read or write past the fence, refused at
// the fence step with a message saying why.
func TestFenceAttacks(t *testing.T) {
	e := newFenceEnv(t)
	H := e.home
	cases := []struct {
		name, tool string
		args       map[string]any
		code       string
		msg        []string
	}{
		{"dot-dot escape", "read_file", map[string]any{"path": "../../.ssh/id_rsa"}, "outside-workdir",
			[]string{"is outside the workdir and no declared [read_paths] entry covers it"}},
		{"absolute path", "read_file", map[string]any{"path": H + "/.ssh/id_rsa"}, "outside-workdir",
			[]string{H + "/.ssh/id_rsa is outside the workdir"}},
		{"dot-dot through a granted dir", "read_file", map[string]any{"path": H + "/docs/../.ssh/id_rsa"}, "outside-workdir",
			[]string{"outside the workdir"}},
		{"symlink planted in a granted dir", "read_file", map[string]any{"path": H + "/docs/evil"}, "outside-workdir",
			[]string{"resolves to " + H + "/.ssh/id_rsa"}},
		{"symlinked workdir component", "read_file", map[string]any{"path": "link/id_rsa"}, "outside-workdir",
			[]string{"link/id_rsa (resolves to " + H + "/.ssh/id_rsa)"}},
		{"symlinked workdir component, list_dir", "list_dir", map[string]any{"path": "link"}, "outside-workdir",
			[]string{"resolves to " + H + "/.ssh"}},
		{"declared but not granted", "read_file", map[string]any{"path": H + "/design/a.md"}, "not-granted",
			[]string{"declares glob:~/design/** but your config does not grant it",
				`add to your config.toml: [agent_read_paths.cto] allow = ["glob:~/design/**"]`}},
		{"granted entry that is itself a symlink out", "read_file", map[string]any{"path": H + "/linkdocs/id_rsa"}, "outside-workdir",
			[]string{"resolves to " + H + "/.ssh/id_rsa"}},
		{"granted by config but never declared", "read_file", map[string]any{"path": H + "/private/p.txt"}, "outside-workdir",
			[]string{"no declared [read_paths] entry covers it"}},
		{"prefix neighbour of a granted dir", "read_file", map[string]any{"path": H + "/docs-secret/x"}, "outside-workdir",
			[]string{"docs-secret/x"}},
		{"regex is anchored", "read_file", map[string]any{"path": H + "/runs-other"}, "outside-workdir",
			[]string{"runs-other"}},
		{"relative glob: * stays in one component", "read_file", map[string]any{"path": "../notes/deep/n.md"}, "outside-workdir",
			[]string{"notes/deep/n.md"}},
		{"missing file outside: same refusal, no existence oracle", "read_file", map[string]any{"path": "/etc/no-such-file-here"}, "outside-workdir",
			[]string{"/etc/no-such-file-here is outside the workdir"}},
		{"list_dir of /", "list_dir", map[string]any{"path": "/"}, "outside-workdir", []string{"/ is outside the workdir"}},
		{"read_files: one bad path refuses the call", "read_files", map[string]any{"paths": []string{"in.txt", "/etc/passwd"}}, "outside-workdir",
			[]string{"/etc/passwd is outside the workdir"}},
		{"write to a granted path", "write_file", map[string]any{"path": H + "/docs/new.txt", "content": "x"}, "write-outside-workdir",
			[]string{"writes never leave the workdir, whatever [read_paths] grants"}},
		{"edit a granted file", "edit_file", map[string]any{"path": H + "/docs/readme.md", "old_string": "granted", "new_string": "owned"}, "write-outside-workdir",
			[]string{"writes never leave the workdir"}},
		{"write through a workdir symlink into a granted dir", "write_file", map[string]any{"path": "docslink/x.txt", "content": "x"}, "write-outside-workdir",
			[]string{"resolves to " + H + "/docs/x.txt"}},
		{"write with dot-dot", "write_file", map[string]any{"path": "sub/../../escape.txt", "content": "x"}, "write-outside-workdir",
			[]string{"outside the workdir"}},
		{"write the workdir itself", "write_file", map[string]any{"path": ".", "content": "x"}, "write-outside-workdir",
			[]string{"outside the workdir"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, res := e.call(tc.tool, tc.args)
			if res.Refusal == nil {
				t.Fatalf("not refused: %+v", res)
			}
			if res.Refusal.Step != StepFence || res.Refusal.Code != tc.code {
				t.Fatalf("refused at %s/%s, want fence/%s: %s", res.Refusal.Step, res.Refusal.Code, tc.code, res.Refusal.Msg)
			}
			for _, m := range tc.msg {
				if !strings.Contains(res.Content, m) {
					t.Errorf("message %q lacks %q", res.Content, m)
				}
			}
			if strings.Contains(res.Content, "SECRET-KEY") {
				t.Fatal("secret leaked into the refusal")
			}
			t.Logf("%s", res.Content)
		})
	}
	if _, err := os.Stat(H + "/docs/new.txt"); err == nil {
		t.Fatal("a refused write landed in the granted dir")
	}
	if b, _ := os.ReadFile(H + "/docs/readme.md"); string(b) != "granted docs" {
		t.Fatal("a refused edit changed a granted file")
	}
}

// TestFenceRefusedAtParse: bad entries fail when the blueprint is parsed, naming the entry.
func TestFenceRefusedAtParse(t *testing.T) {
	cases := []struct{ entry, want string }{
		{"regex:.*", "a regex must be absolute"},
		{"regex:/.*", "catch-all regex"},
		{"regex:(/.*)", "a regex must be absolute"},
		{"glob:/**", "catch-all glob"},
		{"glob:~/docs/../.ssh/*", `a glob cannot contain ".."`},
		{"glob:/data/./x", `a glob cannot contain "."`},
		{"glob:../shared/../../x", `a glob cannot contain ".."`},
		{"/", "catch-all"},
		{"regex:/data/(", "bad regex"},
	}
	for _, tc := range cases {
		t.Run(tc.entry, func(t *testing.T) {
			bp := "name = \"a\"\nversion = \"1\"\n[read_paths]\nallow = [\n  \"ok\",\n  " + strconvQuote(tc.entry) + ",\n]\n[stages.s]\n"
			_, err := blueprint.Parse("bp.toml", []byte(bp), Known)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bp.toml:4") {
				t.Fatalf("err = %v, want %q at bp.toml:4", err, tc.want)
			}
		})
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestFenceAllows: the positive controls, so the attack suite is not passing because
// everything is refused.
func TestFenceAllows(t *testing.T) {
	e := newFenceEnv(t)
	H := e.home
	cases := []struct {
		name, tool string
		args       map[string]any
		want       string
		outside    bool
	}{
		{"workdir file", "read_file", map[string]any{"path": "in.txt"}, "inside", false},
		{"granted exact dir subtree", "read_file", map[string]any{"path": H + "/docs/readme.md"}, "granted docs", true},
		{"through a workdir symlink into a granted dir", "read_file", map[string]any{"path": "docslink/readme.md"}, "granted docs", true},
		{"relative exact grant", "read_file", map[string]any{"path": "../shared/s.txt"}, "relative grant", true},
		{"relative glob grant", "read_file", map[string]any{"path": "../notes/n.md"}, "relative glob grant", true},
		{"anchored regex exact match", "read_file", map[string]any{"path": H + "/runs"}, "exact regex target", true},
		{"write in the workdir", "write_file", map[string]any{"path": "new/dir/f.txt", "content": "hello"}, "wrote 5 bytes", false},
		{"edit in the workdir", "edit_file", map[string]any{"path": "sub/keep.txt", "old_string": "inside", "new_string": "edited"}, "replaced 1", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, res := e.call(tc.tool, tc.args)
			if res.IsError {
				t.Fatalf("refused: %s", res.Content)
			}
			if !strings.Contains(res.Content, tc.want) {
				t.Fatalf("content %q, want %q", res.Content, tc.want)
			}
			if c.Private() != tc.outside {
				t.Fatalf("Private() = %v, want %v", c.Private(), tc.outside)
			}
		})
	}
}

func toolCall(name, args string) provider.ToolCall {
	return provider.ToolCall{ID: "b", Name: name, Args: json.RawMessage(args)}
}
