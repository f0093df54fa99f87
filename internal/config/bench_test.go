package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkParse measures a full load (decode, defaults, validation with its filesystem
// checks) of a realistic lever.yaml, and of a large one with many workers and ports.
func BenchmarkParse(b *testing.B) {
	dir, _ := filepath.EvalSymlinks(b.TempDir())
	os.MkdirAll(filepath.Join(dir, "proj"), 0o755)
	os.WriteFile(filepath.Join(dir, "key"), []byte("k"), 0o600)
	b.Setenv("LEVER_STATE_DIR", filepath.Join(b.TempDir(), "state"))
	var big strings.Builder
	big.WriteString(base + "manager:\n  allow_ports:\n")
	for p := 8000; p < 8200; p++ {
		big.WriteString("    - " + strconv.Itoa(p) + "\n")
	}
	big.WriteString("workers:\n")
	for i := 0; i < 50; i++ {
		big.WriteString("  - name: w" + strconv.Itoa(i) + "\n    dir: w" + strconv.Itoa(i) + "\n")
	}
	for _, tc := range []struct{ name, body string }{{"example", base + "egress: closed\nmanager:\n  allow_ports: [8080, 9000]\n"}, {"200ports-50workers", big.String()}} {
		b.Run(tc.name, func(b *testing.B) {
			data := []byte(tc.body)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse(filepath.Join(dir, "lever.yaml"), data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
