package levconfig

import (
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
)

const toolList = "the tools are ask_operator, context_drop, context_list, edit_file, glob, grep, http_get, http_post, install_tool, list_dir, read_file, read_files, shell, spawn_agent, submit_output, todo_read, todo_write, web_fetch, web_search, write_file, and MCP tools are named mcp__SERVER__TOOL"

// TestToolPermissionNames: a [tool_permissions] key that names no tool is an error naming
// the key and its line (exact messages), in config.toml and in a blueprint alike; the
// built-ins and well-formed MCP names are accepted and take effect (positive controls).
func TestToolPermissionNames(t *testing.T) {
	cases := []struct {
		name, table, err string
		tool             string // for accepted tables: a tool whose permission must be set
		want             blueprint.Permission
	}{
		{"typo", "shel = \"deny\"\n", `FILE:3: key "tool_permissions.shel": unknown tool "shel" (did you mean "shell"?); ` + toolList, "", ""},
		{"case", "Shell = \"deny\"\n", `FILE:3: key "tool_permissions.Shell": unknown tool "Shell" (did you mean "shell"?); ` + toolList, "", ""},
		{"far off", "rm_rf = \"deny\"\n", `FILE:3: key "tool_permissions.rm_rf": unknown tool "rm_rf"; ` + toolList, "", ""},
		{"second key is the bad one", "shell = \"deny\"\nweb_fech = \"allow\"\n", `FILE:4: key "tool_permissions.web_fech": unknown tool "web_fech" (did you mean "web_fetch"?); ` + toolList, "", ""},
		{"first bad key by line", "zzz = \"deny\"\naaa = \"deny\"\n", `FILE:3: key "tool_permissions.zzz": unknown tool "zzz"; ` + toolList, "", ""},
		{"quoted key", "\"shell \" = \"deny\"\n", `FILE:3: key "tool_permissions.shell ": unknown tool "shell " (did you mean "shell"?); ` + toolList, "", ""},
		{"bad MCP name", "mcp__slack = \"deny\"\n", `FILE:3: key "tool_permissions.mcp__slack": bad MCP tool name "mcp__slack": MCP tools are named mcp__SERVER__TOOL or mcp__SERVER__* (SERVER: letters, digits, - and single _; TOOL: letters, digits, _ . -)`, "", ""},
		{"MCP server with __", "mcp__a__b__c = \"deny\"\n", "", "mcp__a__b__c", blueprint.Deny},
		{"bad value still named", "shell = \"no\"\n", `FILE:3: key "tool_permissions.shell": bad permission "no" (want allow, ask or deny)`, "", ""},
		{"control: shell", "shell = \"deny\"\n", "", "shell", blueprint.Deny},
		{"control: MCP tool", "mcp__slack__post_message = \"ask\"\n", "", "mcp__slack__post_message", blueprint.Ask},
		{"control: every tool of one MCP server", "\"mcp__slack__*\" = \"deny\"\n", "", "mcp__slack__*", blueprint.Deny},
		{"wildcard elsewhere than the tool", "\"mcp__*__post\" = \"deny\"\n", `FILE:3: key "tool_permissions.mcp__*__post": bad MCP tool name "mcp__*__post": MCP tools are named mcp__SERVER__TOOL or mcp__SERVER__* (SERVER: letters, digits, - and single _; TOOL: letters, digits, _ . -)`, "", ""},
		{"partial wildcard", "\"mcp__slack__post*\" = \"deny\"\n", `FILE:3: key "tool_permissions.mcp__slack__post*": bad MCP tool name "mcp__slack__post*": MCP tools are named mcp__SERVER__TOOL or mcp__SERVER__* (SERVER: letters, digits, - and single _; TOOL: letters, digits, _ . -)`, "", ""},
		{"control: web_search (spec-named)", "web_search = \"allow\"\n", "", "web_search", blueprint.Allow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// config.toml: [tool_permissions] on line 2, its first key on line 3. The
			// blueprint has name and version first: its keys are one line further down.
			cfgText := "# lev config\n[tool_permissions]\n" + c.table
			bpText := "name = \"a\"\nversion = \"1\"\n[tool_permissions]\n" + c.table + "[stages.s]\n"
			for _, f := range []struct {
				file string
				line int
				load func() (map[string]blueprint.Permission, error)
			}{
				{"config.toml", 0, func() (map[string]blueprint.Permission, error) {
					cfg, err := Parse("config.toml", []byte(cfgText))
					if err != nil {
						return nil, err
					}
					return cfg.Perms, nil
				}},
				{"agent.toml", 1, func() (map[string]blueprint.Permission, error) {
					bp, err := blueprint.Parse("agent.toml", []byte(bpText), nil)
					if err != nil {
						return nil, err
					}
					return bp.Perms, nil
				}},
			} {
				perms, err := f.load()
				if c.err == "" {
					if err != nil || perms[c.tool] != c.want {
						t.Fatalf("%s: %v, perms %v", f.file, err, perms)
					}
					continue
				}
				want := shiftLine(c.err, f.file, f.line)
				if err == nil || err.Error() != want {
					t.Fatalf("%s:\n got  %v\n want %s", f.file, err, want)
				}
			}
		})
	}
}

// shiftLine replaces FILE:N with file:N+by.
func shiftLine(msg, file string, by int) string {
	var n int
	var rest string
	for i := len("FILE:"); i < len(msg); i++ {
		if msg[i] < '0' || msg[i] > '9' {
			rest = msg[i:]
			break
		}
		n = n*10 + int(msg[i]-'0')
	}
	return file + ":" + itoa(n+by) + rest
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
