// Package levconfig loads the user's lev config.toml (strict: unknown keys and bad values
// name the key and line) and watches it, keeping the last good version when a reload
// fails.
//
// It owns config.toml's schema, loading and reloading. It must not apply what the config
// says (the runner, the pipeline and the gate do), and must never replace a good config
// with one that failed to load.
package levconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/readpaths"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/tomlx"
)

// Daemon is [daemon].
type Daemon struct {
	Listen    string `toml:"listen"`     // default 127.0.0.1:7447
	TokenFile string `toml:"token_file"` // default <home>/token
}

// Provider is [provider]: which model API lev talks to and how.
type Provider struct {
	Kind      string `toml:"kind"` // openai (default) | anthropic | scripted
	BaseURL   string `toml:"base_url"`
	Model     string `toml:"model"`
	APIKeyEnv string `toml:"api_key_env"` // env var holding the key; none = no key sent
	Stream    *bool  `toml:"stream"`
	MaxTokens int    `toml:"max_tokens"`
	// Client certificate and CA for an mTLS endpoint (lever's broker /llm/ route).
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	TLSCA   string `toml:"tls_ca"`
	// Script is the scripted provider's rules file.
	Script string `toml:"script"`
}

// Security is [security].
type Security struct {
	ReadPaths               []string `toml:"read_paths"`
	AllowBlueprintReadPaths bool     `toml:"allow_blueprint_read_paths"`
	// CredentialStore is where API keys live. Only "env" (the variable api_key_env names)
	// exists; any other store is refused at load rather than parsed and ignored, which
	// would leave a user believing keys sit in a keychain while lev reads the environment.
	CredentialStore string `toml:"credential_store"`
	// PolicyFile is the taint policy file (internal/lev/policy reads it; docs/lev-security.md, "The policy file").
	PolicyFile string `toml:"policy_file"`
}

// AgentReadPaths is one [agent_read_paths.NAME] table.
type AgentReadPaths struct {
	Allow []string `toml:"allow"`
}

// Config is config.toml.
type Config struct {
	Daemon          Daemon                    `toml:"daemon"`
	Provider        Provider                  `toml:"provider"`
	Security        Security                  `toml:"security"`
	AgentReadPaths  map[string]AgentReadPaths `toml:"agent_read_paths"`
	ToolPermissions map[string]string         `toml:"tool_permissions"`
	Sandbox         *sandbox.Config           `toml:"sandbox"`
	TaintTracking   *blueprint.TaintTracking  `toml:"taint_tracking"`
	MCP             MCP                       `toml:"mcp"`

	// Derived.
	File   string                          `toml:"-"`
	Perms  map[string]blueprint.Permission `toml:"-"`
	Grants readpaths.Grants                `toml:"-"`
}

// DefaultListen is loopback only.
const DefaultListen = "127.0.0.1:7447"

// Home is lev's state directory: $LEV_HOME, else ~/.leviath. It is always absolute: a
// relative one is taken against the current directory (AbsEnv pins it once at start).
func Home() string {
	if h := os.Getenv("LEV_HOME"); h != "" {
		return absPath(h)
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return absPath(".leviath")
	}
	return filepath.Join(h, ".leviath")
}

// PathEnv are the environment variables naming lev's state; AbsEnv pins them.
var PathEnv = []string{"LEV_HOME", "LEV_CONFIG", "LEV_AGENTS_DIR", "LEV_POLICY", "LEV_TOKEN_FILE"}

// AbsEnv makes every PathEnv variable absolute and symlink-resolved (as far as the path
// exists), once, when lev starts: a relative LEV_HOME names the directory under the
// current directory at that moment, whatever directory a tool or a daemon started later
// runs in, so protection of lev's own state can never be turned off by spelling it
// relative.
func AbsEnv() error {
	for _, k := range PathEnv {
		v := os.Getenv(k)
		if v == "" {
			continue
		}
		if strings.HasPrefix(v, "~") {
			return tildeErr(k, v)
		}
		if k == "LEV_POLICY" && !filepath.IsAbs(v) {
			// Pinning it here would hide the problem: `lev policy test` and the daemon
			// (started by an earlier `lev run`) run in different directories, so the
			// same relative value would name two different policy files.
			return fmt.Errorf("LEV_POLICY=%q: must be an absolute path (lev serve and lev policy may run in different directories)", v)
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			return fmt.Errorf("$%s=%q: %w", k, v, err)
		}
		if err := os.Setenv(k, resolveExisting(abs)); err != nil {
			return err
		}
	}
	// LEV_PROTECT is a list (filepath.ListSeparator) of other paths lev treats as its own
	// state: another lev's home that lies in this one's workdirs (lever's workers' homes,
	// for the manager).
	if v := os.Getenv("LEV_PROTECT"); v != "" {
		var out []string
		for _, p := range filepath.SplitList(v) {
			if p == "" {
				continue
			}
			if strings.HasPrefix(p, "~") {
				return tildeErr("LEV_PROTECT", p)
			}
			abs, err := filepath.Abs(p)
			if err != nil {
				return fmt.Errorf("$LEV_PROTECT entry %q: %w", p, err)
			}
			out = append(out, resolveExisting(abs))
		}
		if err := os.Setenv("LEV_PROTECT", strings.Join(out, string(filepath.ListSeparator))); err != nil {
			return err
		}
	}
	return nil
}

// tildeErr: nothing expands "~" in an environment variable set without a shell (lever's
// env, a service file), so "~/w/.lev" would be pinned as a directory named "~" under the
// current one, and the path meant would go unprotected without a word.
func tildeErr(k, v string) error {
	return fmt.Errorf("$%s=%q: \"~\" is not expanded in an environment variable; give an absolute path", k, v)
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// resolveExisting resolves symlinks in the longest existing prefix of abs.
func resolveExisting(abs string) string {
	existing, rest := abs, ""
	for {
		if r, err := filepath.EvalSymlinks(existing); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return abs
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
}

// Path is the config file: $LEV_CONFIG, else <home>/config.toml.
func Path() string {
	if p := os.Getenv("LEV_CONFIG"); p != "" {
		return absPath(p)
	}
	return filepath.Join(Home(), "config.toml")
}

// Load reads file; a missing file is the empty config. Environment overrides apply.
func Load(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(file, data)
}

// Parse validates config text and applies environment overrides.
func Parse(file string, data []byte) (*Config, error) {
	c := &Config{}
	doc, err := tomlx.Decode(file, data, c)
	if err != nil {
		return nil, err
	}
	c.File = file
	c.applyEnv()
	if c.Daemon.Listen == "" {
		c.Daemon.Listen = DefaultListen
	}
	switch c.Provider.Kind {
	case "":
		c.Provider.Kind = "openai"
	case "openai", "anthropic", "scripted":
	default:
		return nil, doc.Errorf("provider.kind", "bad provider %q (want openai, anthropic or scripted)", c.Provider.Kind)
	}
	if (c.Provider.TLSCert == "") != (c.Provider.TLSKey == "") {
		return nil, doc.Errorf("provider.tls_cert", "tls_cert and tls_key go together")
	}
	if c.Perms, err = blueprint.ParsePermissions(doc, c.ToolPermissions); err != nil {
		return nil, err
	}
	if err := checkCredentialStore(doc, c.Security.CredentialStore); err != nil {
		return nil, err
	}
	c.Grants.AllowBlueprint = c.Security.AllowBlueprintReadPaths
	for i, raw := range c.Security.ReadPaths {
		e, err := readpaths.Parse(raw)
		if err != nil {
			return nil, doc.Errorf("security.read_paths", "entry %d: %v", i+1, err)
		}
		c.Grants.Security = append(c.Grants.Security, e)
	}
	c.Grants.Agent = map[string][]readpaths.Entry{}
	for agent, t := range c.AgentReadPaths {
		for i, raw := range t.Allow {
			e, err := readpaths.Parse(raw)
			if err != nil {
				return nil, doc.Errorf("agent_read_paths."+agent+".allow", "entry %d: %v", i+1, err)
			}
			c.Grants.Agent[agent] = append(c.Grants.Agent[agent], e)
		}
	}
	if err := blueprint.CheckSandbox(doc, "sandbox", c.Sandbox); err != nil {
		return nil, err
	}
	if err := blueprint.CheckTaint(doc, "taint_tracking", c.TaintTracking); err != nil {
		return nil, err
	}
	if err := checkMCP(doc, c); err != nil {
		return nil, err
	}
	return c, nil
}

// applyEnv lets the jail configure the provider without a file: lever passes the broker's
// /llm/ URL and the enrolled client certificate this way.
func (c *Config) applyEnv() {
	set := func(dst *string, env string) {
		if v := strings.TrimSpace(os.Getenv(env)); v != "" {
			*dst = v
		}
	}
	set(&c.Provider.Kind, "LEV_PROVIDER")
	set(&c.Provider.BaseURL, "LEV_PROVIDER_BASE_URL")
	set(&c.Provider.Model, "LEV_MODEL")
	set(&c.Provider.TLSCert, "LEV_TLS_CERT")
	set(&c.Provider.TLSKey, "LEV_TLS_KEY")
	set(&c.Provider.TLSCA, "LEV_TLS_CA")
	set(&c.Provider.Script, "LEV_PROVIDER_SCRIPT")
	set(&c.Daemon.Listen, "LEV_LISTEN")
	set(&c.Daemon.TokenFile, "LEV_TOKEN_FILE")
}

// TokenFile is where the daemon's bearer token lives.
func (c *Config) TokenFile() string {
	if c.Daemon.TokenFile != "" {
		return c.Daemon.TokenFile
	}
	return filepath.Join(Home(), "token")
}

// CredentialStoreEnv is the one credential store lev has: the provider's key is read from
// the environment variable [provider] api_key_env names (none in broker mode).
const CredentialStoreEnv = "env"

// checkCredentialStore accepts an absent key or "env", and refuses anything else with the
// reason: lev has no keychain or file store to put keys in.
func checkCredentialStore(doc *tomlx.Doc, v string) error {
	switch v {
	case "", CredentialStoreEnv:
		return nil
	}
	return doc.Errorf("security.credential_store", "credential_store %q is not supported: lev reads API keys only from the environment ([provider] api_key_env), so the only store is \"env\"; set it to \"env\" or remove it", v)
}
