package beneath

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// MkdirAll makes rel and its missing parents beneath d, following no symlink (one on the
// path is an error naming it, never a directory made where it points). It returns the
// directories it made, outermost first, so a caller can undo them.
func (d *Dir) MkdirAll(rel string, perm os.FileMode) ([]string, error) {
	c, err := clean(rel)
	if err != nil {
		return nil, err
	}
	if c == "." {
		return nil, nil
	}
	var made []string
	names := strings.Split(c, "/")
	for i := range names {
		sub := path.Join(names[:i+1]...)
		fd, base, err := d.parent(sub)
		if err != nil {
			return made, d.explain("mkdir", sub, err)
		}
		err = unix.Mkdirat(fd, base, uint32(perm.Perm()))
		if errors.Is(err, unix.EEXIST) {
			// There already: it must be a directory itself, not a link to one.
			var st unix.Stat_t
			if serr := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW); serr != nil {
				err = serr
			} else if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = ErrSymlink
			} else if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				err = unix.ENOTDIR
			} else {
				err = nil
			}
		} else if err == nil {
			made = append(made, sub)
		}
		unix.Close(fd)
		if err != nil {
			return made, &os.PathError{Op: "mkdir", Path: d.name(sub), Err: err}
		}
	}
	return made, nil
}

// Create makes rel beneath d, a new regular file with data: it never opens what is there
// already (a file, or a symlink to one, is os.ErrExist) and follows no symlink on the way.
// A write that fails removes the file it made.
func (d *Dir) Create(rel string, data []byte, perm os.FileMode) error {
	c, err := clean(rel)
	if err != nil {
		return err
	}
	fd, err := d.open(c, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, uint32(perm.Perm()))
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return &os.PathError{Op: "create", Path: d.name(rel), Err: os.ErrExist}
		}
		return d.explain("create", rel, err)
	}
	f := os.NewFile(uintptr(fd), d.name(rel))
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		d.Remove(c) // the file it made, half written: not left behind
		return fmt.Errorf("writing %s: %w", d.name(rel), werr)
	}
	return nil
}

// Remove removes rel beneath d (a file, or an empty directory), following no symlink.
func (d *Dir) Remove(rel string) error {
	c, err := clean(rel)
	if err != nil {
		return err
	}
	fd, base, err := d.parent(c)
	if err != nil {
		return d.explain("remove", rel, err)
	}
	defer unix.Close(fd)
	if err := unix.Unlinkat(fd, base, 0); err == nil {
		return nil
	}
	if err := unix.Unlinkat(fd, base, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "remove", Path: d.name(rel), Err: err}
	}
	return nil
}
