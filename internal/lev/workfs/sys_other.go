//go:build !linux

package workfs

import (
	"os"
	"path/filepath"
)

func openNoBlock(p string) (*os.File, error) { return os.Open(p) }

// fdPath has no portable equivalent; the pre-open check on the resolved path stands.
func fdPath(*os.File) (string, bool) { return "", false }

func writeBeneath(root, rel string, data []byte) error {
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if st, err := os.Lstat(p); err == nil {
		if err := fileModeRegular(st.Mode()); err != nil {
			return err
		}
	}
	return os.WriteFile(p, data, 0o644)
}
