package levimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// LayerFromFS makes the normalised layer (NormaliseLayer's rules) of exactly the named
// paths under root, read where they are: what the guest's `tar --no-recursion
// --ignore-failed-read -T -` piped through NormaliseLayer gives, without a tar process or
// a copy of the files leaving the machine. Bring-up runs it inside the guest (lev's
// bench helper), so the workbench's 150 MiB never cross the guest link.
//
// paths are relative to root, parents before children (debroot.Plan.Paths). A path that
// is gone is skipped, as tar's --ignore-failed-read does; a file whose type changed
// between the look and the open is skipped too (opened without following a symlink and
// without blocking on a FIFO, then checked on the open descriptor).
func LayerFromFS(root string, paths []string) ([]byte, LayerStats, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarPaths(root, paths, pw)) }()
	layer, st, err := NormaliseLayer(pr)
	pr.CloseWithError(errors.New("layer abandoned")) // ends the writer if NormaliseLayer stopped early
	return layer, st, err
}

// tarPaths writes a raw tar of the named paths (no recursion) with real owners, modes and
// hard links, as GNU tar would; NormaliseLayer then applies the image's rules.
func tarPaths(root string, paths []string, w io.Writer) error {
	tw := tar.NewWriter(w)
	type devIno struct{ dev, ino uint64 }
	seen := map[devIno]string{}
	for _, p := range paths {
		full := filepath.Join(root, p)
		info, err := os.Lstat(full)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("reading %s: %w", full, err)
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return fmt.Errorf("reading %s: %w", full, err)
		}
		h.Name = p
		h.Uname, h.Gname = "", ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if h.Linkname, err = os.Readlink(full); err != nil {
				continue
			}
		case info.Mode().IsRegular():
			sys, _ := info.Sys().(*syscall.Stat_t)
			var k devIno
			if sys != nil {
				k = devIno{uint64(sys.Dev), sys.Ino}
				if first, ok := seen[k]; ok {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
					if err := tw.WriteHeader(h); err != nil {
						return err
					}
					continue
				}
			}
			copied, err := copyRegular(tw, h, full, sys)
			if err != nil {
				return err
			}
			// only a file really written can be a later link's target
			if copied && sys != nil && sys.Nlink > 1 {
				seen[k] = p
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyRegular writes one regular file's header and contents. The file is opened without
// following a symlink or blocking on a FIFO and must still be the file Lstat saw; one
// that changed or vanished in between is left out (its header was not written yet).
func copyRegular(tw *tar.Writer, h *tar.Header, full string, sys *syscall.Stat_t) (bool, error) {
	f, err := os.OpenFile(full, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	var now syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &now); err != nil || now.Mode&syscall.S_IFMT != syscall.S_IFREG ||
		(sys != nil && (now.Ino != sys.Ino || now.Dev != sys.Dev)) {
		return false, nil
	}
	h.Size = now.Size
	if err := tw.WriteHeader(h); err != nil {
		return false, err
	}
	// A file that shrank in between is padded with zeros to the size written (as tar
	// does), one that grew is cut there: the header is already out.
	n, err := io.Copy(tw, io.LimitReader(f, h.Size))
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", full, err)
	}
	if n < h.Size {
		if _, err := io.CopyN(tw, zeros{}, h.Size-n); err != nil {
			return false, err
		}
	}
	return true, nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
