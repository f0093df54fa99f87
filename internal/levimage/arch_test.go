package levimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/levimage/levtest"
)

// TestCheckStaticArch: a lev for the other architecture, or a Mac's lev, is refused with
// the path, what it is and what the guest needs; the right one passes (the control that
// the same check accepts real binaries).
func TestCheckStaticArch(t *testing.T) {
	amd, arm, mac := levtest.Binary(t, "linux", "amd64"), levtest.Binary(t, "linux", "arm64"), levtest.Binary(t, "darwin", "arm64")
	for _, tc := range []struct {
		name, path, arch string
		want             []string // substrings of the error; nil: accepted
	}{
		{"linux/amd64 for an amd64 guest", amd, "amd64", nil},
		{"linux/arm64 for an arm64 guest", arm, "arm64", nil},
		{"linux/arm64 for an amd64 guest", arm, "amd64", []string{arm, "built for linux/arm64", "the guest is linux/amd64", "lev-linux-amd64"}},
		{"linux/amd64 for an arm64 guest", amd, "arm64", []string{amd, "built for linux/amd64", "the guest is linux/arm64"}},
		{"a Mac's lev", mac, "arm64", []string{mac, "not an ELF executable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStatic(tc.path, tc.arch)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got, err := ELFArch(tc.path); err != nil || got != tc.arch {
					t.Fatalf("ELFArch %q %v, want %s", got, err, tc.arch)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %s for a %s guest", tc.path, tc.arch)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestFindLevBinaryByArch: lever picks the Linux lev for the guest's architecture from
// LEVER_LEV_BINARY (a wrong one is refused, never passed over), else `lev` beside lever
// when it is that, else lev-linux-<arch> beside lever.
func TestFindLevBinaryByArch(t *testing.T) {
	amd, arm, mac := levtest.Binary(t, "linux", "amd64"), levtest.Binary(t, "linux", "arm64"), levtest.Binary(t, "darwin", "arm64")
	for _, tc := range []struct {
		name   string
		beside map[string]string // file name beside lever -> fixture
		env    string
		arch   string
		want   string   // file name beside lever, or "env"
		errs   []string // substrings of the error when refused
	}{
		{"env names the guest's arch", map[string]string{"lev-linux-arm64": arm}, arm, "arm64", "env", nil},
		{"env names the other arch: refused, not passed over", map[string]string{"lev-linux-arm64": arm}, amd, "arm64", "",
			[]string{"LEVER_LEV_BINARY", amd, "built for linux/amd64", "the guest is linux/arm64"}},
		{"env names a Mac's lev", nil, mac, "arm64", "", []string{"LEVER_LEV_BINARY", mac, "not an ELF"}},
		{"lev beside lever is the guest's (Linux host)", map[string]string{"lev": amd}, "", "amd64", "lev", nil},
		{"a Mac's lev beside lever: lev-linux-arm64", map[string]string{"lev": mac, "lev-linux-arm64": arm, "lev-linux-amd64": amd}, "", "arm64", "lev-linux-arm64", nil},
		{"a Mac's lev beside lever: lev-linux-amd64", map[string]string{"lev": mac, "lev-linux-arm64": arm, "lev-linux-amd64": amd}, "", "amd64", "lev-linux-amd64", nil},
		{"amd64 host's lev, arm64 guest", map[string]string{"lev": amd, "lev-linux-arm64": arm}, "", "arm64", "lev-linux-arm64", nil},
		{"only a Mac's lev", map[string]string{"lev": mac}, "", "arm64", "",
			[]string{"no lev binary for a linux/arm64 guest", "not an ELF", "lev-linux-arm64 (missing)"}},
		{"a mislabelled lev-linux-arm64", map[string]string{"lev-linux-arm64": amd}, "", "arm64", "",
			[]string{"lev-linux-arm64 is built for linux/amd64"}},
		{"unknown guest arch", map[string]string{"lev": amd}, "", "riscv64", "", []string{`guest architecture "riscv64"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range tc.beside {
				b, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			got, err := findLev(tc.arch, tc.env, dir)
			if tc.errs != nil {
				if err == nil {
					t.Fatalf("chose %s, want refusal", got)
				}
				for _, w := range tc.errs {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q does not say %q", err, w)
					}
				}
				return
			}
			want := filepath.Join(dir, tc.want)
			if tc.want == "env" {
				want = tc.env
			}
			if err != nil || got != want {
				t.Fatalf("chose %q (%v), want %q", got, err, want)
			}
			if a, err := ELFArch(got); err != nil || a != tc.arch {
				t.Fatalf("the chosen lev is %q (%v), the guest %s", a, err, tc.arch)
			}
		})
	}
}
