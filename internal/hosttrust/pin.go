package hosttrust

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lever-jail/lever/internal/beneath"
	"github.com/lever-jail/lever/internal/config"
)

// A lever.yaml in the tree is mounted read-only for the agents, but a mount is not a
// guarantee of the file: a save by rename (git checkout, sed -i, many editors) detaches a
// mount that was on the old file, and on a case-insensitive host file system (macOS) the
// agents can open the same file as LEVER.YAML past the mount. So lever also keeps a copy
// of the lever.yaml it last brought up, outside the tree, and every lever command compares
// the file with it before trusting it: a change it did not see brought up is refused
// until the person says it is theirs (--accept-config) or puts the copy back.

// ConfigPin is where lever keeps its copy of the lever.yaml at real (its symlink-free
// path): under lever's state root, named by that path, so an agent that renames the
// instance in the file still finds the copy that holds it to account.
func ConfigPin(stateRoot, real string) string {
	sum := sha256.Sum256([]byte(real))
	return filepath.Join(stateRoot, "accepted-config", hex.EncodeToString(sum[:8])+".yaml")
}

// ErrConfigChanged is the refusal CheckConfig returns (wrapped with what to do).
var ErrConfigChanged = errors.New("lever.yaml changed since lever last brought this jail up")

// CheckConfig says whether data, the bytes just read from the lever.yaml at real, are the
// ones lever last brought up: nil when they are, or when lever never brought it up (there
// is no copy yet: before the first up the agents have not run).
func CheckConfig(stateRoot, real string, data []byte) error {
	pin := ConfigPin(stateRoot, real)
	// lever's own copy, in its state directory; read bounded all the same (the cap of
	// the lever.yaml it copies).
	kept, err := beneath.ReadFile(pin, config.MaxFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading lever's copy of %s: %w", real, err)
	}
	if bytes.Equal(kept, data) {
		return nil
	}
	return fmt.Errorf("%w, and it lies in the tree, which the agents can write: compare it with the copy lever brought up (diff %s %s); if the change is yours, run lever up -c %s --accept-config (or put the copy back: cp %s %s)",
		ErrConfigChanged, pin, real, real, pin, real)
}

// AcceptConfig makes data lever's copy of the lever.yaml at real: written whole (a
// temporary file renamed over the copy), mode 0600, in a directory only the user reads.
func AcceptConfig(stateRoot, real string, data []byte) error {
	pin := ConfigPin(stateRoot, real)
	if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
		return fmt.Errorf("keeping a copy of %s: %w", real, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(pin), ".accepted-*")
	if err != nil {
		return fmt.Errorf("keeping a copy of %s: %w", real, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("keeping a copy of %s: %w", real, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("keeping a copy of %s: %w", real, err)
	}
	if err := os.Rename(tmp.Name(), pin); err != nil {
		return fmt.Errorf("keeping a copy of %s: %w", real, err)
	}
	return nil
}
