package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/hosttrust"
)

// acceptConfigFlag is the root's --accept-config.
const acceptConfigFlag = "accept-config"

// loadConfig is how every command reads its lever.yaml: config.Parse on the bytes read
// once, and, when the file lies in the tree the agents write, those same bytes compared
// with lever's copy of the lever.yaml it last brought up (hosttrust.CheckConfig), unless
// --accept-config says the change is the person's (then they become the copy).
//
// A problem in the tree's contents (config.Problem.Tree: an agent swapped a blueprint for a
// link out of the tree) does not stop these commands, which only read or drive the jail:
// it is a warning naming the file, and lever up (apply, with config.Parse) refuses it.
func loadConfig(cmd *cobra.Command, path string) (*config.Config, error) {
	cfg, _, err := loadWith(cmd, path, func(p string, data []byte) (*config.Config, error) {
		c, warn, err := config.ParseState(p, data)
		if err == nil && len(warn) > 0 {
			w, flush := safeFor(cmd.ErrOrStderr())
			for _, pr := range warn {
				fmt.Fprintf(w, "lever: warning: %v (the agents write the tree; lever up refuses this until it is put right)\n", pr)
			}
			flush()
		}
		return c, err
	})
	return cfg, err
}

// loadIdentity is loadConfig for the commands that need only the instance's identity
// (stop, destroy): a config whose tree or key file has gone still loads.
func loadIdentity(cmd *cobra.Command, path string) (*config.Config, error) {
	cfg, _, err := loadWith(cmd, path, config.ParseIdentity)
	return cfg, err
}

// loadWith reads path once and returns the config parsed from those bytes, and the bytes.
// An empty path is the upward search (configPath).
func loadWith(cmd *cobra.Command, path string, parse func(string, []byte) (*config.Config, error)) (*config.Config, []byte, error) {
	path, err := configPath(path)
	if err != nil {
		return nil, nil, err
	}
	data, err := config.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := parse(path, data)
	if err != nil {
		return nil, nil, err
	}
	real, ok := inTreeConfig(cfg)
	if !ok {
		return cfg, data, nil
	}
	if want := os.Getenv(configDigestEnv); want != "" {
		// The broker a bring-up started: it must read the bytes that bring-up checked.
		if got := digest(data); got != want {
			return nil, nil, fmt.Errorf("%s changed while lever was bringing the jail up (sha256 %s, the bring-up checked %s): run lever up again", real, got, want)
		}
		return cfg, data, nil
	}
	if accepting(cmd) {
		return cfg, data, hosttrust.AcceptConfig(config.StateRoot(), real, data)
	}
	return cfg, data, hosttrust.CheckConfig(config.StateRoot(), real, data)
}

// keepConfig makes data, the bytes a bring-up parsed and brought up, lever's copy of the
// lever.yaml. Only up and apply call it.
func keepConfig(cfg *config.Config, data []byte) error {
	real, ok := inTreeConfig(cfg)
	if !ok {
		return nil
	}
	return hosttrust.AcceptConfig(config.StateRoot(), real, data)
}

// inTreeConfig is the lever.yaml's real path when it lies in the tree.
func inTreeConfig(cfg *config.Config) (string, bool) {
	if cfg.ConfigInTree == "" || cfg.TreePath == "" {
		return "", false
	}
	return filepath.Join(cfg.TreePath, filepath.FromSlash(cfg.ConfigInTree)), true
}

func accepting(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup(acceptConfigFlag)
	return f != nil && f.Value.String() == "true"
}

// configDigestEnv carries, to the broker a bring-up starts, the sha256 of the lever.yaml
// bytes that bring-up checked: the broker reads the file again, and takes it only if it
// is those bytes (the copy is kept only once the bring-up reaches lev).
const configDigestEnv = "LEVER_CONFIG_SHA256"

// configDigest is the broker's environment entry for a lever.yaml in the tree.
func configDigest(cfg *config.Config, data []byte) []string {
	if _, ok := inTreeConfig(cfg); !ok {
		return nil
	}
	return []string{configDigestEnv + "=" + digest(data)}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
