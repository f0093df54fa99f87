package hosttrust

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lever-jail/lever/internal/beneath"
)

// A lever.yaml can come with a cloned repository, and lever up does what it says: it
// reads the key file it names and sends the key to the upstream it names, and opens the
// egress and the ports it asks for. So lever asks the person before the first bring-up of
// a lever.yaml what it grants (the grant block, rendered by the cli), and keeps the block
// they confirmed here, outside the tree; a later up whose block is the same does not ask,
// one whose block changed asks again.

// MaxGrants caps the kept block lever reads back (its own file; bounded all the same).
const MaxGrants = 64 << 10

// GrantsPin is where lever keeps the grant block confirmed for the lever.yaml at real
// (its symlink-free path), under lever's state root.
func GrantsPin(stateRoot, real string) string {
	sum := sha256.Sum256([]byte(real))
	return filepath.Join(stateRoot, "confirmed-grants", hex.EncodeToString(sum[:8])+".txt")
}

// Kept returns the grant block confirmed for the lever.yaml at real, or nil when none
// was (its first up).
func Kept(stateRoot, real string) ([]byte, error) {
	b, err := beneath.ReadFile(GrantsPin(stateRoot, real), MaxGrants)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the grants confirmed for %s: %w", real, err)
	}
	return b, nil
}

// Keep records grants as confirmed for the lever.yaml at real: written whole (a temporary
// file renamed into place), mode 0600, in a directory only the user reads.
func Keep(stateRoot, real string, grants []byte) error {
	pin := GrantsPin(stateRoot, real)
	fail := func(err error) error { return fmt.Errorf("keeping the grants confirmed for %s: %w", real, err) }
	if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
		return fail(err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(pin), ".grants-*")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(grants); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), pin); err != nil {
		return fail(err)
	}
	return nil
}
