package levimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// staticBinary builds a tiny static Go program, the shape lev has.
func staticBinary(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\nfunc main(){}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\ngo 1.22\n"), 0o644)
	out := filepath.Join(dir, "lev")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building: %v: %s", err, b)
	}
	return out
}

func untar(t *testing.T, b []byte) map[string]*struct {
	hdr  *tar.Header
	data []byte
} {
	t.Helper()
	out := map[string]*struct {
		hdr  *tar.Header
		data []byte
	}{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		d, _ := io.ReadAll(tr)
		out[h.Name] = &struct {
			hdr  *tar.Header
			data []byte
		}{h, d}
	}
}

func TestBuildIsAValidReproducibleDockerArchive(t *testing.T) {
	bin := staticBinary(t)
	a, err := Build(Spec{LevBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(Spec{LevBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Archive, b.Archive) || a.Ref != b.Ref {
		t.Fatalf("two builds of the same input differ: %s vs %s", a.Ref, b.Ref)
	}
	ents := untar(t, a.Archive)
	var man []manifestEntry
	if err := json.Unmarshal(ents["manifest.json"].data, &man); err != nil || len(man) != 1 {
		t.Fatalf("manifest: %v %v", man, err)
	}
	cfgBytes := ents[man[0].Config].data
	sum := sha256.Sum256(cfgBytes)
	if "sha256:"+hex.EncodeToString(sum[:]) != a.ConfigDigest {
		t.Errorf("config digest mismatch")
	}
	if man[0].RepoTags[0] != a.Ref || !strings.HasPrefix(a.Ref, Repo+":") {
		t.Errorf("ref %s / tags %v", a.Ref, man[0].RepoTags)
	}
	var cfg imageConfig
	json.Unmarshal(cfgBytes, &cfg)
	layer := ents[man[0].Layers[0]].data
	ls := sha256.Sum256(layer)
	if cfg.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(ls[:]) {
		t.Errorf("diff_id does not match the layer")
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/lev" {
		t.Errorf("entrypoint %v", cfg.Config.Entrypoint)
	}
	le := untar(t, layer)
	want, _ := os.ReadFile(bin)
	if l := le["lev"]; l == nil || !bytes.Equal(l.data, want) || l.hdr.Mode != 0o755 {
		t.Errorf("layer's /lev is not the binary, mode 0755")
	}
	for _, env := range cfg.Config.Env {
		if strings.Contains(strings.ToUpper(env), "KEY") || strings.Contains(strings.ToUpper(env), "TOKEN") {
			t.Errorf("image env carries a secret-looking variable: %s", env)
		}
	}
	for name, e := range le {
		if e.hdr.Mode&0o4000 != 0 || e.hdr.Mode&0o2000 != 0 {
			t.Errorf("%s is setuid/setgid", name)
		}
		if !e.hdr.ModTime.Equal(epoch) {
			t.Errorf("%s has a non-fixed mtime", name)
		}
	}
}

func TestBuildChangesWithInput(t *testing.T) {
	bin := staticBinary(t)
	a, _ := Build(Spec{LevBinary: bin})
	f, _ := os.OpenFile(bin, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0})
	f.Close()
	b, err := Build(Spec{LevBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	if a.Ref == b.Ref {
		t.Fatalf("a changed binary kept the image ref %s", a.Ref)
	}
}

func TestRefusesNonStaticOrNonELF(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "lev")
	os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o755)
	cases := []struct {
		name, path, want string
	}{
		{"shell script", notELF, "not an ELF executable"},
		{"dynamic binary", "/bin/ls", "dynamically linked"},
		{"missing", filepath.Join(t.TempDir(), "nope"), "not an ELF executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.path); tc.name != "missing" && err != nil {
				t.Skipf("%s not present", tc.path)
			}
			_, err := Build(Spec{LevBinary: tc.path})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	bin := staticBinary(t)
	dir := t.TempDir()
	tarball := filepath.Join(dir, "lev.tar")
	os.WriteFile(tarball, []byte("x"), 0o644)
	cases := []struct {
		name    string
		lev     config.Lev
		kind    Kind
		wantErr string
	}{
		{"built by default", config.Lev{}, Built, ""},
		{"configured image", config.Lev{Image: "localhost/mine:1"}, Configured, ""},
		{"tarball relative to config", config.Lev{ImageTarball: "lev.tar"}, Tarball, ""},
		{"both set", config.Lev{Image: "a", ImageTarball: "lev.tar"}, "", "both set"},
		{"missing tarball", config.Lev{ImageTarball: "nope.tar"}, "", "lev.image_tarball"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Resolve(&config.Config{Dir: dir, Lev: tc.lev}, bin, runtime.GOARCH)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || s.Kind != tc.kind {
				t.Fatalf("got %+v %v, want kind %s", s, err, tc.kind)
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	bin := staticBinary(b)
	b.ResetTimer()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Build(Spec{LevBinary: bin}); err != nil {
			b.Fatal(err)
		}
	}
}
