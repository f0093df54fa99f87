// Package fspath holds the one answer to "is this path inside that directory", which the
// config checks, the containers' mount plan, teardown, lev's fence and lev's blueprint
// checks (is this blueprint file in the run's tree?) all ask. It compares paths as written (after lexical cleaning) and never touches the file system: callers
// resolve symlinks first when the answer must hold against them.
package fspath

import (
	"path/filepath"
	"strings"
)

// Within reports whether p is dir or lies under it. Both are cleaned first, so "a/b/../c"
// and "a/c/" compare as "a/c"; a sibling that only shares a prefix ("/srv/tree2" against
// "/srv/tree") is not inside. Relative and absolute paths never contain each other.
func Within(dir, p string) bool {
	dir, p = filepath.Clean(dir), filepath.Clean(p)
	sep := string(filepath.Separator)
	switch {
	case filepath.IsAbs(dir) != filepath.IsAbs(p):
		return false
	case p == dir:
		return true
	case dir == ".":
		return p != ".." && !strings.HasPrefix(p, ".."+sep)
	case dir == sep:
		return true
	}
	return strings.HasPrefix(p, dir+sep)
}
