package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// Load reads lever.yaml at path. PLACEHOLDER: minimal strict decode; the full loader
// (unknown key with its line, typed errors, validation) replaces the body, not the
// signature.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Path, c.Dir = abs, filepath.Dir(abs)
	if c.Egress == "" {
		c.Egress = "open"
	}
	if c.Backend == "netns" && os.Getenv("LEVER_DEV_NETNS") != "1" {
		return nil, fmt.Errorf("%s: backend netns is a development substrate with no hypervisor boundary; it is accepted only when LEVER_DEV_NETNS=1 is set", path)
	}
	return &c, nil
}
