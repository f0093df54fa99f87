//go:build !linux

package workfs

import (
	"os"
	"path/filepath"
)

func openNoBlock(p string) (*os.File, error) { return os.Open(p) }

// fdReal has no portable equivalent; the checks on the resolved path before opening stand.
func fdReal(*os.File) (string, error) { return "", errFDUnsupported }

func (f *FS) ancestorsClear(string, string, *os.File) error { return nil }

func (f *FS) fileAncestorsClear(string, string, *os.File, string) error { return nil }

// openWrite without descriptor checks: lev's jail is Linux, this is for building and
// testing elsewhere.
func (f *FS) openWrite(tool string, a Access, rel string, rw int, create bool) (*os.File, error) {
	p := filepath.Join(f.Workdir, rel)
	if create {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, f.mapWriteErr(tool, a, err)
		}
		rw |= os.O_CREATE
	}
	if st, err := os.Lstat(p); err == nil {
		if err := fileModeRegular(st.Mode()); err != nil {
			return nil, f.mapWriteErr(tool, a, err)
		}
	}
	file, err := os.OpenFile(p, rw, 0o644)
	if err != nil {
		return nil, f.mapWriteErr(tool, a, err)
	}
	return file, nil
}
