package levtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// PyMCPModule is the module name the tests install PyMCPServer under (levmcp_srv.py in a
// directory on the server's PYTHONPATH), started as `python3 -m levmcp_srv`.
const PyMCPModule = "levmcp_srv"

// PyMCPServer is a stdio MCP server in Python. Its one tool, where, answers a JSON object
// saying where the server runs: cwd (its working directory), safe_path (whether Python's
// PYTHONSAFEPATH flag is on) and module (the file it was loaded from).
const PyMCPServer = `import json, os, sys
def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    meth, mid = m.get("method"), m.get("id")
    if mid is None:
        continue
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "py", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": "where", "inputSchema": {"type": "object"}}]}})
    elif meth == "tools/call":
        where = {"cwd": os.getcwd(), "safe_path": bool(getattr(sys.flags, "safe_path", False)), "module": __file__}
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(where)}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
`

// PyMCPWhere is the where tool's answer.
type PyMCPWhere struct {
	Cwd      string `json:"cwd"`
	SafePath bool   `json:"safe_path"`
	Module   string `json:"module"`
}

// PlantedModule is what an agent would write under the server's module name: imported,
// it writes marker and stops the server. No single quote in it, so a test can put it in
// a TOML literal string.
func PlantedModule(marker string) string {
	return fmt.Sprintf("open(%q, \"w\").write(\"planted code ran\")\nraise SystemExit(3)\n", marker)
}

// Python3 is an absolute python3 of 3.11 or later (PYTHONSAFEPATH came with 3.11):
// /usr/bin/python3 when it is one, else python3 from PATH resolved to its executable
// (a pyenv shim would need a PATH and HOME the servers do not get). Without one the test
// is skipped, and fails under CI=true.
func Python3(t testing.TB) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		out, err := exec.Command(py, "-c", "import sys; print(sys.executable if sys.version_info >= (3, 11) else '')").Output()
		if exe := strings.TrimSpace(string(out)); err == nil && exe != "" {
			return exe
		}
	}
	skip("python3 3.11 or later is not installed")
	return ""
}
