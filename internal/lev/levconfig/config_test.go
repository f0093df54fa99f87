package levconfig

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"unknown key", "[security]\nread_pathz = []\n", `config.toml:2: unknown key "security.read_pathz"`},
		{"unknown table", "[secruity]\nread_paths = []\n", `unknown key "secruity"`},
		{"bad provider", "[provider]\nkind = \"gemini\"\n", `config.toml:2: key "provider.kind": bad provider "gemini"`},
		{"cert without key", "[provider]\ntls_cert = \"c.pem\"\n", `key "provider.tls_cert": tls_cert and tls_key go together`},
		{"bad permission", "[tool_permissions]\nshell = \"yes\"\n", `config.toml:2: key "tool_permissions.shell": bad permission "yes"`},
		{"catch-all grant", "[security]\nread_paths = [\"/\"]\n", `config.toml:2: key "security.read_paths": entry 1: read path "/": a catch-all`},
		{"bad agent grant", "[agent_read_paths.cto]\nallow = [\"regex:.*\"]\n", `config.toml:2: key "agent_read_paths.cto.allow": entry 1`},
		{"sandbox typo", "[sandbox]\nnetwrok = false\n", `config.toml:2: unknown key "sandbox.netwrok"`},
		{"wrong type", "[security]\nallow_blueprint_read_paths = \"yes\"\n", `config.toml:2: key "security.allow_blueprint_read_paths"`},
		{"syntax", "[security\n", `config.toml:1:`},
		{"credential store keychain", "[security]\ncredential_store = \"keychain\"\n", `config.toml:2: key "security.credential_store": credential_store "keychain" is not supported: lev reads API keys only from the environment`},
		{"credential store file", "[security]\ncredential_store = \"file\"\n", `key "security.credential_store": credential_store "file" is not supported`},
		{"credential store case", "[security]\ncredential_store = \"ENV\"\n", `key "security.credential_store": credential_store "ENV" is not supported`},
		{"table in another case", "[Tool_Permissions]\nshell = \"deny\"\n", `config.toml:1: unknown key "Tool_Permissions" (keys are case-sensitive: the key is "tool_permissions")`},
		{"two spellings of one table", "[tool_permissions]\nshell = \"allow\"\n[TOOL_PERMISSIONS]\nshell = \"deny\"\n", `config.toml:3: unknown key "TOOL_PERMISSIONS"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("config.toml", []byte(tc.text))
			if err == nil || c != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestEnvOverrides(t *testing.T) {
	t.Setenv("LEV_PROVIDER_BASE_URL", "https://10.0.2.2:8443/llm/v1")
	t.Setenv("LEV_TLS_CERT", "/run/lever/c.pem")
	t.Setenv("LEV_TLS_KEY", "/run/lever/k.pem")
	t.Setenv("LEV_TLS_CA", "/run/lever/ca.pem")
	c, err := Parse("config.toml", []byte("[provider]\nbase_url = \"https://api.openai.com/v1\"\nmodel = \"m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Provider
	if p.BaseURL != "https://10.0.2.2:8443/llm/v1" || p.TLSCert != "/run/lever/c.pem" || p.TLSKey != "/run/lever/k.pem" || p.TLSCA != "/run/lever/ca.pem" || p.Model != "m" || p.Kind != "openai" || p.APIKeyEnv != "" {
		t.Fatalf("%+v", p)
	}
	if c.Daemon.Listen != DefaultListen {
		t.Fatalf("listen %s", c.Daemon.Listen)
	}
}

// TestCredentialStoreEnv: the positive control of the refusals in TestParse: "env" (and no
// key at all) loads, and keeps the value it was given.
func TestCredentialStoreEnv(t *testing.T) {
	for _, text := range []string{"[security]\ncredential_store = \"env\"\n", ""} {
		c, err := Parse("config.toml", []byte(text))
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if text != "" && c.Security.CredentialStore != CredentialStoreEnv {
			t.Fatalf("credential_store = %q", c.Security.CredentialStore)
		}
	}
}
