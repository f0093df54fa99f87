package levimage

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncDir flushes the file system holding dir (the copies, the links, the directories).
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
