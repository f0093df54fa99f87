package levconfig

import (
	"strings"
	"testing"
)

// TestMCPConfig: every [mcp.servers.NAME] refusal names the key and its line, and nothing
// loads; each row's control (the same table made good) loads and means what it says.
func TestMCPConfig(t *testing.T) {
	const stdio = "[mcp.servers.fs]\ncommand = \"/usr/bin/node\"\n"
	cases := []struct {
		name, text, want string
	}{
		{"control: stdio", stdio + "args = [\"x.js\"]\nenv = { PATH = \"/usr/bin\" }\nclassification = \"local\"\nagents = [\"cto\"]\nroots = true\ntimeout_seconds = 5\nresult_label = \"private\"\n", ""},
		{"control: http", "[mcp.servers.web]\nurl = \"http://127.0.0.1:3000/mcp\"\nheaders = { X-Key = \"k\" }\nclassification = \"outbound\"\nclearance = \"internal\"\n", ""},
		{"unknown key", stdio + "comand = \"/bin/x\"\n", `config.toml:3: unknown key "mcp.servers.fs.comand"`},
		{"key in another case", stdio + "Args = []\n", `config.toml:3: unknown key "mcp.servers.fs.Args" (keys are case-sensitive: the key is "args")`},
		{"unknown table key", "[mcp]\nserver = {}\n", `config.toml:2: unknown key "mcp.server"`},
		{"neither command nor url", "[mcp.servers.fs]\nargs = []\n", `config.toml:1: key "mcp.servers.fs": set exactly one of command (a stdio server) or url (a Streamable HTTP server)`},
		{"both", stdio + "url = \"http://127.0.0.1/\"\n", `key "mcp.servers.fs": set exactly one of command`},
		{"relative command", "[mcp.servers.fs]\ncommand = \"npx\"\n", `config.toml:2: key "mcp.servers.fs.command": "npx" is not an absolute path`},
		{"headers on stdio", stdio + "headers = { A = \"b\" }\n", `config.toml:3: key "mcp.servers.fs.headers": headers are for an HTTP server`},
		{"env on http", "[mcp.servers.w]\nurl = \"http://127.0.0.1/\"\nenv = { A = \"b\" }\n", `config.toml:2: key "mcp.servers.w.url": args and env are for a stdio server`},
		{"bad url", "[mcp.servers.w]\nurl = \"file:///etc/passwd\"\n", `config.toml:2: key "mcp.servers.w.url": "file:///etc/passwd": want an http:// or https:// URL`},
		{"url with user info", "[mcp.servers.w]\nurl = \"http://u:p@127.0.0.1/\"\n", `key "mcp.servers.w.url"`},
		{"lev's token in env", stdio + "env = { LEV_TOKEN = \"x\" }\n", `config.toml:3: key "mcp.servers.fs.env.LEV_TOKEN": LEV_TOKEN is lev's own setting; an MCP server never gets lev's token, keys or provider settings`},
		{"lev's provider settings in env", stdio + "env = { LEV_PROVIDER_BASE_URL = \"x\" }\n", `key "mcp.servers.fs.env.LEV_PROVIDER_BASE_URL": LEV_PROVIDER_BASE_URL is lev's own setting`},
		{"the provider key in env", "[provider]\napi_key_env = \"OPENAI_API_KEY\"\n" + stdio + "env = { OPENAI_API_KEY = \"sk\" }\n", `config.toml:5: key "mcp.servers.fs.env.OPENAI_API_KEY": OPENAI_API_KEY holds lev's provider key`},
		{"bad server name", "[mcp.servers.a__b]\ncommand = \"/bin/x\"\n", `config.toml:1: key "mcp.servers.a__b": bad MCP server name "a__b"`},
		{"trailing underscore", "[mcp.servers.a_]\ncommand = \"/bin/x\"\n", `bad MCP server name "a_"`},
		{"bad classification", stdio + "classification = \"trusted\"\n", `config.toml:3: key "mcp.servers.fs.classification": bad classification "trusted"`},
		{"outbound without clearance", stdio + "classification = \"outbound\"\n", `key "mcp.servers.fs.clearance": classification = "outbound" needs a clearance`},
		{"clearance without classification", stdio + "clearance = \"private\"\n", `config.toml:3: key "mcp.servers.fs.clearance": a clearance needs classification = "outbound"`},
		{"local with clearance", stdio + "classification = \"local\"\nclearance = \"private\"\n", `key "mcp.servers.fs.clearance": a local server is not gated`},
		{"bad clearance", stdio + "classification = \"outbound\"\nclearance = \"secret\"\n", `needs a clearance: public, internal or private (got "secret")`},
		{"bad result label", stdio + "result_label = \"public\"\n", `key "mcp.servers.fs.result_label": bad label "public"`},
		{"timeout too long", stdio + "timeout_seconds = 601\n", `key "mcp.servers.fs.timeout_seconds": 601 is not between 1 and 600`},
		{"sampling is not configurable", stdio + "sampling = true\n", `config.toml:3: unknown key "mcp.servers.fs.sampling"`},
		{"control: http+sse", "[mcp.servers.web]\nurl = \"http://127.0.0.1:3000/sse\"\ntransport = \"sse\"\n", ""},
		{"control: streamable named", "[mcp.servers.web]\nurl = \"http://127.0.0.1:3000/mcp\"\ntransport = \"streamable\"\n", ""},
		{"bad transport", "[mcp.servers.web]\nurl = \"http://127.0.0.1:3000/sse\"\ntransport = \"websocket\"\n", `config.toml:3: key "mcp.servers.web.transport": bad transport "websocket" (want streamable, the default, or sse`},
		{"transport in another case", "[mcp.servers.web]\nurl = \"http://127.0.0.1:3000/sse\"\ntransport = \"SSE\"\n", `key "mcp.servers.web.transport": bad transport "SSE"`},
		{"empty transport", "[mcp.servers.web]\nurl = \"http://127.0.0.1:3000/sse\"\ntransport = \"\"\n", `config.toml:3: key "mcp.servers.web.transport": bad transport ""`},
		{"empty transport on stdio", stdio + "transport = \"\"\n", `config.toml:3: key "mcp.servers.fs.transport": transport is for an HTTP server`},
		{"transport on stdio", stdio + "transport = \"sse\"\n", `config.toml:3: key "mcp.servers.fs.transport": transport is for an HTTP server (url)`},
		{"streamable on stdio", stdio + "transport = \"streamable\"\n", `key "mcp.servers.fs.transport": transport is for an HTTP server`},
		{"transport not a string", "[mcp.servers.web]\nurl = \"http://127.0.0.1:3000/sse\"\ntransport = 1\n", `mcp.servers.web.transport`},
	}
	// What each control means: the transport lev mcp list and the run record show.
	wantTransport := map[string]string{"control: stdio": "stdio", "control: http": "http", "control: http+sse": "http+sse", "control: streamable named": "http"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("config.toml", []byte(tc.text))
			if tc.want == "" {
				if err != nil || len(c.MCP.Servers) != 1 {
					t.Fatalf("control: %v", err)
				}
				for _, srv := range c.MCP.Servers {
					if got := srv.Transport(); got != wantTransport[tc.name] {
						t.Fatalf("control: transport %q, want %q", got, wantTransport[tc.name])
					}
				}
				return
			}
			if err == nil || c != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %q", err, tc.want)
			}
		})
	}
}

// TestResolveMCP: declaring is not granting. Only a server config.toml names starts, for
// the installed agents its agents list admits; a tree blueprint or one run by its path
// gets none.
func TestResolveMCP(t *testing.T) {
	c, err := Parse("config.toml", []byte("[mcp.servers.all]\ncommand = \"/bin/x\"\n[mcp.servers.only]\ncommand = \"/bin/x\"\nagents = [\"cto\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, server, installed string
		foreign, granted        bool
		why                     string
	}{
		{"control: every installed agent", "all", "cto", false, true, "[mcp.servers.all] (every installed agent)"},
		{"control: listed agent", "only", "cto", false, true, "[mcp.servers.only] agents"},
		{"unlisted agent", "only", "dev", false, false, `[mcp.servers.only] agents = ["cto"] does not include "dev"`},
		{"not in the config", "slack", "cto", false, false, "config.toml has no [mcp.servers.slack]: declaring a server is not granting it"},
		{"tree blueprint", "all", "", true, false, "the blueprint is from the run's tree: it gets no MCP server"},
		{"run by its path", "all", "", false, false, "not installed in the agents directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := c.ResolveMCP([]string{tc.server}, tc.installed, tc.foreign)
			if len(st) != 1 || st[0].Granted != tc.granted || !strings.Contains(st[0].Why, tc.why) {
				t.Fatalf("%+v", st)
			}
		})
	}
}
