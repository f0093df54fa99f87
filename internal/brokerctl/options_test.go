package brokerctl

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

func TestOptionsFromConfig(t *testing.T) {
	for _, tc := range []struct {
		backend, upstream string
		env               map[string]string
		listen, names     string
		ips               string
		auth              string
		err               string
	}{
		{"orbstack", "https://api.anthropic.com", map[string]string{EnvAliasIP: "198.18.0.1,fd07::1"},
			"127.0.0.1:7443", "[host.orb.internal]", "[198.18.0.1 fd07::1]", AuthXAPIKey, ""},
		{"lima", "https://api.openai.com/v1", map[string]string{EnvAliasIP: "192.168.5.2"},
			"127.0.0.1:7443", "[host.lima.internal]", "[192.168.5.2]", AuthBearer, ""},
		{"netns", "https://llm.example/v1", map[string]string{EnvAliasIP: "10.77.0.1", EnvAuthHeader: AuthXAPIKey},
			"10.77.0.1:7443", "[host.lever.internal]", "[10.77.0.1]", AuthXAPIKey, ""},
		{"orbstack", "https://x", map[string]string{EnvAliasIP: "198.18.0.1", EnvListen: "127.0.0.1:9000", EnvAliasName: "alias.test"},
			"127.0.0.1:9000", "[alias.test]", "[198.18.0.1]", AuthBearer, ""},
		{"netns", "https://x", nil, "", "", "", "", "must name the host-side alias address"},
		{"orbstack", "https://x", map[string]string{EnvAliasIP: "not-an-ip"}, "", "", "", "", `"not-an-ip" is not an IP address`},
	} {
		t.Run(tc.backend+"/"+tc.listen+tc.err, func(t *testing.T) {
			cfg := &config.Config{Name: "t", Backend: tc.backend, Dir: "/etc/lever",
				Broker: config.Broker{LLMAuth: "api-key", APIKeyFile: "key", LLMUpstream: tc.upstream, JailPort: 7443, AdminPort: 7444}}
			o, err := OptionsFromConfig(cfg, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%s %v %v %s %s %s", o.Listen, o.SANNames, o.SANIPs, o.AuthHeader, o.AdminListen, o.APIKeyFile)
			want := fmt.Sprintf("%s %s %s %s 127.0.0.1:7444 /etc/lever/key", tc.listen, tc.names, tc.ips, tc.auth)
			if got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		})
	}
	// Subscription instances have no /llm/ route and need no key.
	cfg := &config.Config{Name: "t", Backend: "orbstack", Broker: config.Broker{LLMAuth: "subscription", LLMUpstream: "https://x", JailPort: 1, AdminPort: 2}}
	o, err := OptionsFromConfig(cfg, func(string) string { return "" })
	if err != nil || o.Upstream != "" || o.APIKeyFile != "" {
		t.Fatalf("subscription: %+v %v", o, err)
	}
}
