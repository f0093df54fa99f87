package levimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fsTree makes a small root with every kind of entry a guest's package files include,
// and some they must not carry into the workbench.
func fsTree(t *testing.T) (string, []string) {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"usr/bin", "usr/lib/git-core", "etc", "real"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(os.WriteFile(filepath.Join(root, "usr/bin/git"), bytes.Repeat([]byte("git\x00"), 5000), 0o755))
	must(os.Link(filepath.Join(root, "usr/bin/git"), filepath.Join(root, "usr/lib/git-core/git-add")))
	must(os.WriteFile(filepath.Join(root, "usr/bin/su"), []byte("su"), 0o755))
	must(os.Chmod(filepath.Join(root, "usr/bin/su"), 0o755|os.ModeSetuid))
	must(os.WriteFile(filepath.Join(root, "etc/empty"), nil, 0o644))
	must(os.Symlink("../usr/bin/git", filepath.Join(root, "etc/git-link")))
	must(os.Symlink("real", filepath.Join(root, "linkdir")))
	must(os.WriteFile(filepath.Join(root, "real/f"), []byte("under a link"), 0o644))
	must(syscall.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644))
	paths := []string{"etc", "etc/empty", "etc/fifo", "etc/git-link", "etc/gone", "linkdir", "linkdir/f",
		"usr", "usr/bin", "usr/bin/git", "usr/bin/su", "usr/lib", "usr/lib/git-core", "usr/lib/git-core/git-add"}
	return root, paths
}

// The layer made in place is byte for byte the one the guest's tar piped through
// NormaliseLayer gives (the path bring-up took before): same files, links, modes.
func TestLayerFromFSIsTheTarLayer(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar")
	}
	root, paths := fsTree(t)
	argv := []string{"-C", root, "--no-recursion", "--ignore-failed-read", "--verbatim-files-from", "-cf", "-", "-T", "-"}
	cmd := exec.Command("tar", argv...)
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\n") + "\n")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("tar: %v", err)
	}
	want, wst, err := NormaliseLayer(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got, gst, err := LayerFromFS(root, paths)
	if err != nil {
		t.Fatal(err)
	}
	if gst != wst {
		t.Errorf("stats: in place %+v, through tar %+v", gst, wst)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("layers differ:\n in place: %v\n via tar:  %v", entries(t, got), entries(t, want))
	}
	// The control: the layer holds what the test put there, and drops what it must.
	es := entries(t, got)
	for _, w := range []string{"usr/bin/git 0755 0", "usr/lib/git-core/git-add 0755 1 usr/bin/git", "usr/bin/su 0755 0", "etc/git-link 0777 2 ../usr/bin/git", "linkdir 0777 2 real"} {
		if !strings.Contains(strings.Join(es, "\n"), w) {
			t.Errorf("layer lacks %q: %v", w, es)
		}
	}
	for _, bad := range []string{"etc/fifo", "linkdir/f", "etc/gone"} {
		for _, e := range es {
			if strings.HasPrefix(e, bad+" ") {
				t.Errorf("layer holds %s: %v", bad, es)
			}
		}
	}
	if gst.Stripped != 1 {
		t.Errorf("setuid bits cleared on %d entries, want 1 (su)", gst.Stripped)
	}
}

// A path that turned into a FIFO after it was listed neither hangs the build nor enters
// the layer; one that became a symlink is not followed.
func TestLayerFromFSSwappedPaths(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "secret"), []byte("not for the layer"), 0o600)
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("secret", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	var sys syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "secret"), &sys); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pipe", "link"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		// as if Lstat had seen the regular file "secret" at this name
		ok, err := copyRegular(tw, &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg}, filepath.Join(root, name), &sys)
		if err != nil || ok || buf.Len() != 0 {
			t.Errorf("%s: copied %v, err %v, %d bytes written", name, ok, err, buf.Len())
		}
	}
	// control: the file itself is copied
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	ok, err := copyRegular(tw, &tar.Header{Name: "secret", Mode: 0o644, Typeflag: tar.TypeReg}, filepath.Join(root, "secret"), &sys)
	if err != nil || !ok || !bytes.Contains(buf.Bytes(), []byte("not for the layer")) {
		t.Errorf("the file itself: copied %v, err %v", ok, err)
	}
}

func entries(t *testing.T, layer []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e := fmt.Sprintf("%s %04o %c", strings.TrimSuffix(h.Name, "/"), h.Mode&0o7777, h.Typeflag)
		if h.Linkname != "" {
			e += " " + h.Linkname
		}
		out = append(out, e)
	}
}

// A planned name that reads as a tar option ("--recursion") is only a name: the layer
// holds exactly the listed paths, never what is under a listed directory. (The guest's
// tar needed --verbatim-files-from for this; reading in place there is no option parser.)
func TestLayerFromFSNamesAreOnlyNames(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	for _, n := range []string{"--recursion", "plain", "sub/secret"} {
		os.WriteFile(filepath.Join(root, n), []byte("x"), 0o644)
	}
	layer, _, err := LayerFromFS(root, []string{"--recursion", "sub", "plain"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(entries(t, layer), "\n")
	for _, want := range []string{"--recursion 0644 0", "sub 0755 5", "plain 0644 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("layer lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "sub/secret") {
		t.Errorf("the layer took sub/secret, which the plan did not list:\n%s", got)
	}
	// control: listing it takes it
	layer, _, _ = LayerFromFS(root, []string{"sub", "sub/secret"})
	if !strings.Contains(strings.Join(entries(t, layer), "\n"), "sub/secret 0644 0") {
		t.Error("control: a listed sub/secret is not in the layer")
	}
}
