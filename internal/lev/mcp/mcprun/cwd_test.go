package mcprun_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levtest"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
)

const pyAgent = `name = "p"
version = "1"
[mcp]
servers = ["py"]
[stages.s]
prompt = "p"
tools = ["write_file", "mcp__py__*", "submit_output"]
`

// TestServerNotStartedInTheWorkdir: config.toml starts a Python MCP server as
// `python3 -m levmcp_srv`, its module installed in a directory on the table's
// PYTHONPATH. A first run's agent writes levmcp_srv.py into the workdir with write_file
// (allowed by default); a second run then starts the server in the same workdir. Python
// puts a -m's current directory first on sys.path, so a server started in the workdir
// would import the agent's file (outside any tool permission, with the server's env):
// the positive controls show the planted file would write its marker when run so (the
// same module from a directory the config names, and python3 -m in the workdir, as lev
// used to start servers). The server starts in "/" instead (mcprun.ServerDir): the
// planted code does not run, the second run's call reaches the real module, and it sees
// PYTHONSAFEPATH on unless the table sets it; with PYTHONSAFEPATH = "" (the user's
// opt-out) the working directory alone keeps the planted file out.
func TestServerNotStartedInTheWorkdir(t *testing.T) {
	py := levtest.Python3(t)
	for _, tc := range []struct {
		name    string
		sandbox string // config.toml's [sandbox] table, if any
		env     string // the env table's extra keys
		// payloadOnPath installs the planted module, not the server, in the config's
		// PYTHONPATH directory: the control that the payload runs when it is imported.
		payloadOnPath bool
		wantSafe      bool
	}{
		{"PYTHONSAFEPATH set by lev", "", "", false, true},
		{"PYTHONSAFEPATH = \"\" in the table", "", `, PYTHONSAFEPATH = ""`, false, false},
		// The namespace kind (network on: no network namespace) with Python's default.
		{"kind namespace, PYTHONSAFEPATH = \"\"", "[sandbox]\nkind = \"namespace\"\n", `, PYTHONSAFEPATH = ""`, false, false},
		{"control: the payload where the config imports from", "", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			lib := filepath.Join(w.root, "lib")
			os.MkdirAll(lib, 0o755)
			marker := filepath.Join(w.root, "planted-ran")
			planted := levtest.PlantedModule(marker)
			mod := levtest.PyMCPServer
			if tc.payloadOnPath {
				mod = planted
			}
			os.WriteFile(filepath.Join(lib, levtest.PyMCPModule+".py"), []byte(mod), 0o644)
			args, _ := json.Marshal(map[string]string{"path": levtest.PyMCPModule + ".py", "content": planted})
			w.start(tc.sandbox+"[tool_permissions]\n\"mcp__py__*\" = \"allow\"\n[mcp.servers.py]\nclassification = \"local\"\ntimeout_seconds = 20\ncommand = "+q(py)+
				"\nargs = [\"-m\", "+q(levtest.PyMCPModule)+"]\nenv = { PYTHONPATH = "+q(lib)+tc.env+" }\n", "",
				calls1("s", [2]string{"write_file", string(args)}, [2]string{"mcp__py__where", `{}`}))
			w.agent("p", pyAgent)

			first := w.run("p", false)
			w.wholeRecord(first)
			if c := w.call(first, "write_file"); c.IsError || c.Refusal != nil {
				t.Fatalf("the agent could not plant its module: %+v", c)
			}
			if b, err := os.ReadFile(filepath.Join(w.wd, levtest.PyMCPModule+".py")); err != nil || string(b) != planted {
				t.Fatalf("planted module: %q, %v", b, err)
			}
			second := w.run("p", false)
			w.wholeRecord(second)
			_, err := os.Stat(marker)
			ran := err == nil

			if tc.payloadOnPath {
				// The positive control: imported, the payload runs in the server's sandbox
				// and its marker lands; the server then never starts.
				if !ran || second.MCP[0].Started {
					t.Fatalf("control: payload ran %v; mcp %+v", ran, second.MCP)
				}
				return
			}
			if ran {
				b, _ := os.ReadFile(marker)
				t.Fatalf("the module the agent planted in the workdir ran at the server's start: %q", b)
			}
			if !second.MCP[0].Started {
				t.Fatalf("server not started: %+v", second.MCP)
			}
			c := w.call(second, "mcp__py__where")
			var where levtest.PyMCPWhere
			if err := json.Unmarshal([]byte(c.Result), &where); err != nil {
				t.Fatalf("where: %v: %+v", err, c)
			}
			if where.Cwd != mcprun.ServerDir || where.Module != filepath.Join(lib, levtest.PyMCPModule+".py") || where.SafePath != tc.wantSafe {
				t.Fatalf("the server runs in %q from %q with safe_path %v; want %q, the installed module, safe_path %v",
					where.Cwd, where.Module, where.SafePath, mcprun.ServerDir, tc.wantSafe)
			}

			// The positive control for the old behaviour: the same command in the workdir,
			// as lev started servers before, runs the planted file.
			cmd := exec.Command(py, "-m", levtest.PyMCPModule)
			cmd.Dir, cmd.Env = w.wd, []string{"PYTHONPATH=" + lib}
			cmd.Run()
			if _, err := os.Stat(marker); err != nil {
				t.Fatalf("control: python3 -m in the workdir did not run the planted module: %v", err)
			}
		})
	}
}
