package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levtest"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
)

// TestBinaryMCPServerNotStartedInCwd: lev mcp list and lev mcp test start config.toml's
// servers as a run would, from whatever directory the user is in: a project whose agent
// planted levmcp_srv.py, the module of a `python3 -m levmcp_srv` server. The table sets
// PYTHONSAFEPATH = "" (Python's default, so the working directory is all that keeps the
// planted file out). Started in the current directory, Python would import the planted
// file and it would write its marker (the control at the end runs that command there);
// lev starts the server in "/": both commands reach the installed module and the marker
// never appears. Positive control: the same payload on the PYTHONPATH of a second server
// runs under lev mcp test (the server then fails), so the payload does run where lev
// starts servers when it is imported.
func TestBinaryMCPServerNotStartedInCwd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	py := levtest.Python3(t)
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	levHome, project, lib, payloadLib := filepath.Join(root, "lev"), filepath.Join(root, "project"), filepath.Join(root, "lib"), filepath.Join(root, "payload")
	for _, d := range []string{levHome, project, lib, payloadLib} {
		os.MkdirAll(d, 0o755)
	}
	marker, payloadMarker := filepath.Join(root, "planted-ran"), filepath.Join(root, "payload-ran")
	file := levtest.PyMCPModule + ".py"
	os.WriteFile(filepath.Join(lib, file), []byte(levtest.PyMCPServer), 0o644)
	os.WriteFile(filepath.Join(project, file), []byte(levtest.PlantedModule(marker)), 0o644)
	os.WriteFile(filepath.Join(payloadLib, file), []byte(levtest.PlantedModule(payloadMarker)), 0o644)
	server := func(name, pythonPath string) string {
		return "[mcp.servers." + name + "]\ncommand = " + jsonArg(py) + "\nargs = [\"-m\", " + jsonArg(levtest.PyMCPModule) + "]\n" +
			"env = { PYTHONPATH = " + jsonArg(pythonPath) + ", PYTHONSAFEPATH = \"\" }\nclassification = \"local\"\ntimeout_seconds = 20\n"
	}
	cfg := "[tool_permissions]\n\"mcp__py__*\" = \"allow\"\n" + server("py", lib) + server("payload", payloadLib)
	os.WriteFile(filepath.Join(levHome, "config.toml"), []byte(cfg), 0o600)
	env := []string{"LEV_HOME=" + levHome, "PATH=" + os.Getenv("PATH"), "HOME=" + root}
	planted := func() bool { _, err := os.Stat(marker); return err == nil }

	t.Run("lev mcp list", func(t *testing.T) {
		out, errOut, code := runLevIn(t, bin, project, env, "mcp", "list", "--json")
		var list []mcpServerInfo
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		if planted() {
			t.Fatal("lev mcp list ran the module planted in the current directory")
		}
		for _, s := range list {
			if s.Name == "py" && (s.State != mcpOK || strings.Join(s.Tools, ",") != "mcp__py__where") {
				t.Fatalf("py: %+v", s)
			}
		}
	})
	t.Run("lev mcp test", func(t *testing.T) {
		out, errOut, code := runLevIn(t, bin, project, env, "mcp", "test", "py", "where", "--json")
		var rep mcpTestReport
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Call == nil {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		if planted() {
			t.Fatal("lev mcp test ran the module planted in the current directory")
		}
		var where levtest.PyMCPWhere
		if err := json.Unmarshal([]byte(rep.Call.Result), &where); err != nil {
			t.Fatalf("where: %v: %q", err, rep.Call.Result)
		}
		if where.Cwd != mcprun.ServerDir || where.Module != filepath.Join(lib, file) || where.SafePath {
			t.Fatalf("the server ran in %q from %q (safe_path %v); want %q, the installed module, safe_path off as the table says",
				where.Cwd, where.Module, where.SafePath, mcprun.ServerDir)
		}
	})
	t.Run("control: the payload runs when imported", func(t *testing.T) {
		out, errOut, code := runLevIn(t, bin, project, env, "mcp", "test", "payload")
		if code != 1 {
			t.Fatalf("exit %d, want 1 (the payload stops the server): %s%s", code, out, errOut)
		}
		if _, err := os.Stat(payloadMarker); err != nil {
			t.Fatalf("the payload on the server's PYTHONPATH did not run under lev mcp test: %v\n%s%s", err, out, errOut)
		}
	})
	t.Run("control: started in the current directory, the planted module runs", func(t *testing.T) {
		cmd := exec.Command(py, "-m", levtest.PyMCPModule)
		cmd.Dir, cmd.Env = project, []string{"PYTHONPATH=" + lib, "PYTHONSAFEPATH="}
		cmd.Run()
		if !planted() {
			t.Fatal("python3 -m in the project did not run the planted module")
		}
	})
}
