//go:build !linux

package levimage

import "os"

// syncDir flushes dir itself. Trees are made in a Linux guest; this keeps the package
// building for a Mac's lever, which never makes one.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
