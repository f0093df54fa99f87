package probes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScanFindsSecretWithoutBeingGivenIt(t *testing.T) {
	dir := t.TempDir()
	key := []byte("sk-test-9f8e7d6c5b4a39281706f5e4d3c2b1a0")
	os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
	os.MkdirAll(filepath.Join(dir, "pruned"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "clean.txt"), []byte(strings.Repeat("sk-test-", 1000)), 0o644)
	os.WriteFile(filepath.Join(dir, "a", "b", "leak.bin"), append(append([]byte("prefix\x00"), key...), "suffix"...), 0o644)
	os.WriteFile(filepath.Join(dir, "pruned", "leak"), key, 0o644)
	os.WriteFile(filepath.Join(dir, "exact"), key, 0o644)
	// across the reader's 64 KiB buffer boundary
	os.WriteFile(filepath.Join(dir, "a", "straddle"), append(make([]byte, 1<<16-7), key...), 0o644)
	tgt, dig := Fingerprint(key, 1000003)
	s := Scan{Len: len(key), Base: 1000003, Target: tgt, SHA256: dig, Roots: []string{dir}, Prune: []string{filepath.Join(dir, "pruned")}}
	hits, scanned, _ := scan(s)
	want := []string{filepath.Join(dir, "a", "b", "leak.bin"), filepath.Join(dir, "a", "straddle"), filepath.Join(dir, "exact")}
	if strings.Join(hits, ",") != strings.Join(want, ",") || scanned != 4 {
		t.Fatalf("hits %v scanned %d, want %v and 4", hits, scanned, want)
	}
	req, _ := os.ReadFile(filepath.Join(dir, "a", "clean.txt"))
	if strings.Contains(string(req), string(key)) {
		t.Fatal("fixture broken")
	}
}

func BenchmarkScan(b *testing.B) {
	dir := b.TempDir()
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(dir, "f"), data, 0o644)
	key := []byte("sk-bench-0123456789abcdef0123456789")
	tgt, dig := Fingerprint(key, 1000003)
	s := Scan{Len: len(key), Base: 1000003, Target: tgt, SHA256: dig, Roots: []string{dir}}
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		scan(s)
	}
}
