// Package keyfile reads the file that holds the broker's LLM API key, and refuses one the
// agents could read or one that is not the person's own.
//
// A lever.yaml may come with a cloned repository and name any path as api_key_file; lever
// then reads that file and sends its contents upstream as the key. So the file must be
// the user's own (owned by the effective user, no group or other bits), have exactly one
// name (a second hard link could lie in the tree), and lie outside the tree by every
// spelling: through a symlink, "..", or a bind mount of the tree, what counts is the
// directory the opened file really lies in, compared by device and inode with the tree.
// The checks are made on the opened file and the key is read from that same descriptor,
// never re-opened by name, so a swap between check and read is not possible.
package keyfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/secretfile"
)

// Max caps what is read: an API key is a line; a bigger file is not one.
const Max = 64 << 10

// ErrInTree is wrapped by the refusal of a key file the agents could reach.
var ErrInTree = errors.New("the agents read the tree")

// keyKind words the private-file refusals for an API key file.
var keyKind = secretfile.Kind{Noun: "a key file", Own: "lever reads an API key only from a file of your own"}

// Check opens path and refuses it as Read would, reading nothing.
func Check(path, tree string) error {
	f, err := secretfile.Open(path, true)
	if err != nil {
		return err
	}
	defer f.Close()
	return check(f, path, tree)
}

// Read returns the contents of the key file at path after the checks, read from the
// descriptor the checks were made on, at most Max bytes. tree is the jail's tree ("" for
// none). A symlink is followed (a key kept behind a link is fine: what is checked is the
// file it lands on).
func Read(path, tree string) ([]byte, error) {
	f, err := secretfile.Open(path, true)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := check(f, path, tree); err != nil {
		return nil, err
	}
	return secretfile.ReadCapped(f, path, Max, "an API key file holds one line")
}

// check adds to the private-file checks what a key file named by a lever.yaml needs: one
// name only, and outside the tree.
func check(f *os.File, path, tree string) error {
	st, err := secretfile.Check(f, path, keyKind)
	if err != nil {
		return err
	}
	if st.Nlink != 1 {
		return fmt.Errorf("%s has %d hard links: another name of it could lie where the agents read; remove its other names (find / -xdev -samefile %s lists them), or keep the key in a new file of its own", path, st.Nlink, path)
	}
	if tree == "" {
		return nil
	}
	return outside(st, path, tree)
}

// outside refuses the file (stat st, opened from path) when it lies in tree: by its real
// path, and by every directory above it compared by device and inode with the tree's (a
// bind mount of the tree elsewhere has the tree's inode).
func outside(st *unix.Stat_t, path, tree string) error {
	var tst unix.Stat_t
	if err := unix.Stat(tree, &tst); err != nil {
		return fmt.Errorf("checking %s against the tree: %w", path, &os.PathError{Op: "stat", Path: tree, Err: err})
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("checking %s against the tree: %w", path, err)
	}
	// The name resolved now must still be the file opened: else it was swapped, and its
	// place is not known.
	var rst unix.Stat_t
	if err := unix.Stat(real, &rst); err != nil || !same(&rst, st) {
		return fmt.Errorf("%s changed while lever checked it; run the command again", path)
	}
	refuse := func() error {
		return fmt.Errorf("%s (really %s) lies in the tree %s: %w; keep the key outside it (e.g. ~/.config/lever/api-key)", path, real, tree, ErrInTree)
	}
	if realTree, err := filepath.EvalSymlinks(tree); err == nil && fspath.Within(realTree, real) {
		return refuse()
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		var dst unix.Stat_t
		if err := unix.Stat(d, &dst); err != nil {
			return fmt.Errorf("checking %s against the tree: %w", path, &os.PathError{Op: "stat", Path: d, Err: err})
		}
		if same(&dst, &tst) {
			return refuse()
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return inTreeMount(real, path, tree, refuse)
}

func same(a, b *unix.Stat_t) bool {
	return uint64(a.Dev) == uint64(b.Dev) && uint64(a.Ino) == uint64(b.Ino)
}
