//go:build !unix

package labels

import (
	"os"
	"time"
)

// identity is unknown off unix: labels follow the path alone.
func identity(string) (dev, ino uint64, ok bool) { return 0, 0, false }

// fileID is unknown off unix: every file counts as changed (fail closed).
func fileID(os.FileInfo) (dev, ino uint64, ctime time.Time, ok bool) { return 0, 0, time.Time{}, false }
