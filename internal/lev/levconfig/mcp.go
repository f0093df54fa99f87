package levconfig

import (
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/lev/tomlx"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// MCP is [mcp]: the MCP servers the user allows to start. A blueprint may declare the
// servers it wants ([mcp] servers = [...]); only a server named here can start, for the
// agents its `agents` list names (every installed agent when the list is absent).
type MCP struct {
	Servers map[string]*MCPServer `toml:"servers"`
}

// MCPServer is one [mcp.servers.NAME] table: a stdio server (command, args, env) or an
// HTTP server (url, headers, transport), never both.
type MCPServer struct {
	// Command is the stdio server's executable, an absolute path: nothing searches lev's
	// PATH for it, and the server gets no PATH unless env gives one.
	Command string   `toml:"command"`
	Args    []string `toml:"args"`
	// Env is the server's whole environment. Nothing of lev's is inherited (no token, no
	// provider key, no PATH): what a server needs is written here.
	Env map[string]string `toml:"env"`

	URL     string            `toml:"url"`
	Headers map[string]string `toml:"headers"`
	// HTTPTransport is how lev speaks to an HTTP server: "streamable" (the default,
	// Streamable HTTP) or "sse" (the older HTTP+SSE transport, for a server that offers
	// only that). Both pass the same caps; an SSE server's message endpoint must have the
	// url's origin.
	HTTPTransport string `toml:"transport"`

	// Classification is how the taint gate treats the server's tools: "" (unclassified:
	// outbound with Public clearance, the fail-closed default of docs/lev-security.md), "outbound" (with
	// Clearance), or "local" (cannot send data off the machine: not gated).
	Classification string `toml:"classification"`
	Clearance      string `toml:"clearance"`
	// ResultLabel is the taint label of what the server's tools return: internal (the
	// default, like shell output) or private (a server that reads private data).
	ResultLabel string `toml:"result_label"`
	// Agents are the install names of the agents that may use the server; absent: every
	// installed agent that declares it. A blueprint from the tree never gets a server.
	Agents []string `toml:"agents"`
	// TimeoutSeconds bounds the start and handshake and each call (default 30, at most 600).
	TimeoutSeconds int `toml:"timeout_seconds"`
	// Roots lets the server ask for the client's roots (roots/list): lev answers with the
	// run's workdir, and audits each request. Sampling and elicitation are always refused.
	Roots bool `toml:"roots"`

	Name string `toml:"-"`
}

// Stdio reports whether the server is started as a child process.
func (s *MCPServer) Stdio() bool { return s.Command != "" }

// Transport names how lev reaches the server.
func (s *MCPServer) Transport() string {
	if s.Stdio() {
		return "stdio"
	}
	if s.SSE() {
		return "http+sse"
	}
	return "http"
}

// SSE reports whether the server speaks the older HTTP+SSE transport.
func (s *MCPServer) SSE() bool { return s.HTTPTransport == "sse" }

// GrantedTo reports whether the agent installed as name may use the server.
func (s *MCPServer) GrantedTo(installed string) bool {
	if installed == "" {
		return false
	}
	if s.Agents == nil {
		return true
	}
	for _, a := range s.Agents {
		if a == installed {
			return true
		}
	}
	return false
}

// MCPServerNames lists the configured servers, sorted.
func (c *Config) MCPServerNames() []string {
	var n []string
	for k := range c.MCP.Servers {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// levEnvPrefix: lev's own settings (LEV_TOKEN, LEV_TOKEN_FILE, LEV_PROVIDER_*, LEV_TLS_*)
// are never handed to a server, not even written out in its env table.
const levEnvPrefix = "LEV_"

var levels = map[string]bool{"public": true, "internal": true, "private": true}

func checkMCP(doc *tomlx.Doc, c *Config) error {
	for _, name := range c.MCPServerNames() {
		s := c.MCP.Servers[name]
		key := "mcp.servers." + name
		if s == nil {
			return doc.Errorf(key, "empty server table")
		}
		s.Name = name
		if err := toolnames.CheckServer(name); err != nil {
			return doc.Errorf(key, "%v", err)
		}
		switch {
		case (s.Command == "") == (s.URL == ""):
			return doc.Errorf(key, "set exactly one of command (a stdio server) or url (a Streamable HTTP server)")
		case s.Command != "" && !filepath.IsAbs(s.Command):
			return doc.Errorf(key+".command", "%q is not an absolute path (nothing searches lev's PATH for a server)", s.Command)
		case s.URL != "" && (s.Args != nil || s.Env != nil):
			return doc.Errorf(key+".url", "args and env are for a stdio server (command); an HTTP server takes url and headers")
		case s.Command != "" && s.Headers != nil:
			return doc.Errorf(key+".headers", "headers are for an HTTP server (url); a stdio server takes command, args and env")
		case s.Command != "" && (s.HTTPTransport != "" || doc.Line(key+".transport") != 0):
			return doc.Errorf(key+".transport", "transport is for an HTTP server (url); a stdio server is started from command")
		}
		switch s.HTTPTransport {
		case "streamable", "sse":
		case "":
			if doc.Line(key+".transport") == 0 {
				break // absent: the default
			}
			fallthrough // written out empty: a typo, not a choice
		default:
			return doc.Errorf(key+".transport", "bad transport %q (want streamable, the default, or sse for a server that offers only the older HTTP+SSE transport)", s.HTTPTransport)
		}
		if s.URL != "" {
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				return doc.Errorf(key+".url", "%q: want an http:// or https:// URL with a host and no user info", s.URL)
			}
		}
		for k := range s.Env {
			switch {
			case k == "" || strings.ContainsAny(k, "=\x00"):
				return doc.Errorf(key+".env", "bad variable name %q", k)
			case strings.HasPrefix(k, levEnvPrefix):
				return doc.Errorf(key+".env."+k, "%s is lev's own setting; an MCP server never gets lev's token, keys or provider settings", k)
			case c.Provider.APIKeyEnv != "" && k == c.Provider.APIKeyEnv:
				return doc.Errorf(key+".env."+k, "%s holds lev's provider key ([provider] api_key_env); an MCP server never gets it", k)
			}
		}
		for k := range s.Headers {
			if k == "" || strings.ContainsAny(k, ": \r\n") {
				return doc.Errorf(key+".headers", "bad header name %q", k)
			}
		}
		switch s.Classification {
		case "":
			if s.Clearance != "" {
				return doc.Errorf(key+".clearance", "a clearance needs classification = \"outbound\"")
			}
		case "outbound":
			if !levels[s.Clearance] {
				return doc.Errorf(key+".clearance", "classification = \"outbound\" needs a clearance: public, internal or private (got %q)", s.Clearance)
			}
		case "local":
			if s.Clearance != "" {
				return doc.Errorf(key+".clearance", "a local server is not gated, so it has no clearance")
			}
		default:
			return doc.Errorf(key+".classification", "bad classification %q (want outbound or local; leave it out for unclassified, which is gated as outbound with public clearance)", s.Classification)
		}
		switch s.ResultLabel {
		case "", "internal", "private":
		default:
			return doc.Errorf(key+".result_label", "bad label %q (want internal or private)", s.ResultLabel)
		}
		if s.TimeoutSeconds < 0 || s.TimeoutSeconds > 600 {
			return doc.Errorf(key+".timeout_seconds", "%d is not between 1 and 600 (0: the default 30)", s.TimeoutSeconds)
		}
		for _, a := range s.Agents {
			if a == "" || strings.ContainsAny(a, "/\x00") {
				return doc.Errorf(key+".agents", "bad agent name %q", a)
			}
		}
	}
	return nil
}

// MCPStatus is one server a blueprint declares, and whether it may start for that agent.
type MCPStatus struct {
	Server  string
	Granted bool
	// Why says what granted it or why not.
	Why string
	// Config is the user's table for the server; nil when the config names none.
	Config *MCPServer
}

// ResolveMCP is the one place a blueprint's declared servers meet the config (the run,
// lev validate and lev mcp list use it): a server starts only when config.toml names it
// and its agents list admits the blueprint's install name. A blueprint from the tree
// (foreign) or one run by its path (no install name) gets none.
func (c *Config) ResolveMCP(declared []string, installed string, foreign bool) []MCPStatus {
	var out []MCPStatus
	for _, name := range declared {
		st := MCPStatus{Server: name, Config: c.MCP.Servers[name]}
		switch {
		case st.Config == nil:
			st.Why = fmt.Sprintf("config.toml has no [mcp.servers.%s]: declaring a server is not granting it", name)
		case foreign:
			st.Why = "the blueprint is from the run's tree: it gets no MCP server"
		case installed == "":
			st.Why = "the blueprint is not installed in the agents directory: MCP servers are granted to installed agents only"
		case !st.Config.GrantedTo(installed):
			st.Why = fmt.Sprintf("[mcp.servers.%s] agents = %q does not include %q", name, st.Config.Agents, installed)
		default:
			st.Granted = true
			if st.Config.Agents == nil {
				st.Why = fmt.Sprintf("[mcp.servers.%s] (every installed agent)", name)
			} else {
				st.Why = fmt.Sprintf("[mcp.servers.%s] agents", name)
			}
		}
		out = append(out, st)
	}
	return out
}
