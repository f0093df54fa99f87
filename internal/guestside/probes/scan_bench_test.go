package probes

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// rollingFound is the search acceptance used before the native one (a Rabin-Karp rolling
// hash over every byte, one file at a time), kept here only so BenchmarkSearch measures
// both side by side on the same files.
func rollingFound(path string, secret []byte, base uint64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	var target, pow uint64 = 0, 1
	for i, b := range secret {
		target = target*base + uint64(b)
		if i > 0 {
			pow *= base
		}
	}
	want := fmt.Sprintf("%x", sha256.Sum256(secret))
	L := len(secret)
	ring, win, buf := make([]byte, L), make([]byte, L), make([]byte, 1<<16)
	var h, n uint64
	slot := 0
	for {
		m, err := r.Read(buf)
		for _, b := range buf[:m] {
			if n >= uint64(L) {
				h -= uint64(ring[slot]) * pow
			}
			h = h*base + uint64(b)
			ring[slot] = b
			if slot++; slot == L {
				slot = 0
			}
			n++
			if h == target && n >= uint64(L) {
				copy(win, ring[slot:])
				copy(win[L-slot:], ring[:slot])
				if fmt.Sprintf("%x", sha256.Sum256(win)) == want {
					return true
				}
			}
		}
		if err != nil {
			return false
		}
	}
}

// BenchmarkSearch: the same tree (a guest-like mix: 2000 files of 16 KiB and eight of
// 4 MiB, 96 MiB in all) searched by the old rolling hash and by Search.
func BenchmarkSearch(b *testing.B) {
	dir := b.TempDir()
	var total int64
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	for i := 0; i < 2000; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%04d", i)), data[i:i+16<<10], 0o644)
		total += 16 << 10
	}
	for i := 0; i < 8; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("l%d", i)), data, 0o644)
		total += int64(len(data))
	}
	key := []byte("sk-ant-api03-bench0123456789abcdef0123456789abcdef")
	b.Run("rolling-hash", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() && rollingFound(p, key, 1000003) {
					b.Fatal("false hit")
				}
				return nil
			})
		}
	})
	b.Run("native", func(b *testing.B) {
		b.SetBytes(total)
		s := Scan{Patterns: Patterns(key), Roots: []string{dir}}
		for i := 0; i < b.N; i++ {
			if st := Search(s); len(st.Found) != 0 || st.Bytes != total {
				b.Fatalf("%+v", st)
			}
		}
	})
}
