package provider

import (
	"fmt"
	"os"
	"time"

	"github.com/lever-jail/lever/internal/lev/levconfig"
)

// New builds the provider config.toml (plus its LEV_* environment overrides) describes.
// No API key is required: with a base URL and a client certificate (lever's broker) the key
// is added on the host, never seen here.
func New(c levconfig.Provider) (Provider, error) {
	if c.Kind == "scripted" {
		if c.Script == "" {
			return nil, fmt.Errorf("provider scripted: [provider] script (or LEV_PROVIDER_SCRIPT) is required")
		}
		return LoadScripted(c.Script)
	}
	client, err := NewHTTPClient(TLSFiles{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA}, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	key := ""
	if c.APIKeyEnv != "" {
		key = os.Getenv(c.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("provider %s: api_key_env names %s, which is empty", c.Kind, c.APIKeyEnv)
		}
	}
	stream := c.Stream != nil && *c.Stream
	switch c.Kind {
	case "anthropic":
		return &Anthropic{BaseURL: c.BaseURL, APIKey: key, Stream: stream, Client: client}, nil
	case "openai", "":
		return &OpenAI{BaseURL: c.BaseURL, APIKey: key, Stream: stream, Client: client}, nil
	}
	return nil, fmt.Errorf("unknown provider kind %q", c.Kind)
}
