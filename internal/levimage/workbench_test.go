package levimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type entry struct {
	h    tar.Header
	data string
}

func guestTar(t *testing.T, es []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := e.h
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.data))
	}
	tw.Close()
	return b.Bytes()
}

// guestFiles is what GNU tar in a guest emits for a few planned paths, with the metadata
// that differs between guests and between runs.
func guestFiles(mtime time.Time, uid int) []entry {
	return []entry{
		{h: tar.Header{Typeflag: tar.TypeDir, Name: "usr/", Mode: 0o755, ModTime: mtime, Uid: uid, Uname: "root"}},
		{h: tar.Header{Typeflag: tar.TypeDir, Name: "usr/bin/", Mode: 0o755, ModTime: mtime}},
		{h: tar.Header{Typeflag: tar.TypeReg, Name: "usr/bin/git", Mode: 0o755, ModTime: mtime, Uid: uid, Gid: uid, Uname: "u", Gname: "g",
			PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "x"}}, data: "git"},
		{h: tar.Header{Typeflag: tar.TypeReg, Name: "usr/bin/su", Mode: 0o4755, ModTime: mtime}, data: "su"},
		{h: tar.Header{Typeflag: tar.TypeReg, Name: "usr/bin/wall", Mode: 0o2755, ModTime: mtime}, data: "wall"},
		{h: tar.Header{Typeflag: tar.TypeLink, Name: "usr/bin/git-hard", Linkname: "usr/bin/git", ModTime: mtime}},
		{h: tar.Header{Typeflag: tar.TypeLink, Name: "usr/bin/dangling", Linkname: "usr/bin/nothere", ModTime: mtime}},
		{h: tar.Header{Typeflag: tar.TypeSymlink, Name: "bin", Linkname: "usr/bin", ModTime: mtime}},
		{h: tar.Header{Typeflag: tar.TypeReg, Name: "bin/sneaky", Mode: 0o755, ModTime: mtime}, data: "x"},
		{h: tar.Header{Typeflag: tar.TypeChar, Name: "dev-null", Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: mtime}},
		{h: tar.Header{Typeflag: tar.TypeFifo, Name: "fifo", Mode: 0o644, ModTime: mtime}},
		{h: tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: mtime}},
	}
}

func TestNormaliseLayer(t *testing.T) {
	raw := guestTar(t, guestFiles(time.Unix(1700000000, 0), 1000))
	layer, st, err := NormaliseLayer(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got := untar(t, layer)
	cases := []struct {
		name    string
		present bool
		mode    int64
	}{
		{"usr/", true, 0o755},
		{"usr/bin/git", true, 0o755},
		{"usr/bin/su", true, 0o755},   // setuid cleared
		{"usr/bin/wall", true, 0o755}, // setgid cleared
		{"usr/bin/git-hard", true, 0},
		{"usr/bin/dangling", false, 0}, // hard link to nothing kept
		{"bin", true, 0},               // the symlink itself
		{"bin/sneaky", false, 0},       // never written through a symlink
		{"dev-null", false, 0},         // no device nodes
		{"fifo", false, 0},
		{"tmp/", true, 0o1777}, // the sticky bit stays
	}
	for _, tc := range cases {
		e, ok := got[tc.name]
		if ok != tc.present {
			t.Errorf("%s present = %v, want %v", tc.name, ok, tc.present)
			continue
		}
		if !ok {
			continue
		}
		h := e.hdr
		//lint:ignore SA1019 archive/tar still fills the deprecated Xattrs from SCHILY.xattr records: an image must carry none
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(epoch) || len(h.Xattrs) != 0 {
			//lint:ignore SA1019 the same deprecated field, printed
			t.Errorf("%s: owner %d:%d %q:%q mtime %v xattrs %v", tc.name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, h.Xattrs)
		}
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "SCHILY.xattr") {
				t.Errorf("%s keeps %s", tc.name, k)
			}
		}
		if tc.mode != 0 && h.Mode != tc.mode {
			t.Errorf("%s mode %o, want %o", tc.name, h.Mode, tc.mode)
		}
	}
	if got["usr/bin/git"].data == nil || string(got["usr/bin/git"].data) != "git" {
		t.Error("content lost")
	}
	if st.Stripped != 2 || st.Dropped != 4 {
		t.Errorf("stats %+v, want 2 stripped, 4 dropped", st)
	}
}

func TestNormaliseLayerRefusesEscapes(t *testing.T) {
	for _, name := range []string{"/etc/passwd", "../x", "a/../../x", "."} {
		raw := guestTar(t, []entry{{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644}, data: "x"}})
		if _, _, err := NormaliseLayer(bytes.NewReader(raw)); err == nil || !strings.Contains(err.Error(), "not a relative path") {
			t.Errorf("%q: err %v", name, err)
		}
	}
	raw := guestTar(t, []entry{{h: tar.Header{Typeflag: tar.TypeLink, Name: "x", Linkname: "/etc/shadow"}}})
	if _, _, err := NormaliseLayer(bytes.NewReader(raw)); err == nil {
		t.Error("absolute hard link target accepted")
	}
}

// TestWorkbenchReproducible: guests that differ only in timestamps and owners give the
// same layer and the same image config digest; a content change gives another.
func TestWorkbenchReproducible(t *testing.T) {
	lev := staticBinary(t)
	build := func(es []entry) *Image {
		layer, _, err := NormaliseLayer(bytes.NewReader(guestTar(t, es)))
		if err != nil {
			t.Fatal(err)
		}
		im, err := BuildWorkbench(lev, layer, WorkbenchRef("debian", strings.Repeat("a", 64), "d"), "amd64")
		if err != nil {
			t.Fatal(err)
		}
		return im
	}
	a := build(guestFiles(time.Unix(1700000000, 0), 1000))
	b := build(guestFiles(time.Unix(1800000000, 0), 0))
	if a.ConfigDigest != b.ConfigDigest || !bytes.Equal(a.Archive, b.Archive) {
		t.Fatalf("same files, different image: %s vs %s", a.ConfigDigest, b.ConfigDigest)
	}
	changed := guestFiles(time.Unix(1700000000, 0), 1000)
	changed[2].data = "git2"
	if c := build(changed); c.ConfigDigest == a.ConfigDigest {
		t.Fatal("content change did not change the digest")
	}
	// two layers, the top one being exactly the lev image's layer
	files := untar(t, a.Archive)
	var man []manifestEntry
	json.Unmarshal(files["manifest.json"].data, &man)
	if len(man) != 1 || len(man[0].Layers) != 2 || man[0].RepoTags[0] != WorkbenchRef("debian", strings.Repeat("a", 64), "d") {
		t.Fatalf("manifest %+v", man)
	}
	levIm, err := Build(Spec{LevBinary: lev})
	if err != nil {
		t.Fatal(err)
	}
	var levMan []manifestEntry
	json.Unmarshal(untar(t, levIm.Archive)["manifest.json"].data, &levMan)
	if man[0].Layers[1] != levMan[0].Layers[0] {
		t.Errorf("lev layer %s differs from the lev image's %s (podman would store it twice)", man[0].Layers[1], levMan[0].Layers[0])
	}
	var cfg imageConfig
	json.Unmarshal(files[man[0].Config].data, &cfg)
	if strings.Join(cfg.Config.Entrypoint, " ") != "/lev" || strings.Join(cfg.Config.Cmd, " ") != "bench serve --socket /run/lever-bench/exec.sock" || cfg.Config.Labels["io.lever.role"] != "bench" {
		t.Errorf("config %+v", cfg.Config)
	}
}

func TestWorkbenchRefKey(t *testing.T) {
	base := WorkbenchRef("debian", "s1", "l1")
	if !strings.HasPrefix(base, WorkbenchRepo+":") || len(base) != len(WorkbenchRepo)+13 {
		t.Fatalf("ref %q", base)
	}
	if WorkbenchRef("debian", "s1", "l1") != base {
		t.Fatal("not deterministic")
	}
	for name, other := range map[string]string{
		"status changed": WorkbenchRef("debian", "s2", "l1"),
		"lev changed":    WorkbenchRef("debian", "s1", "l2"),
		"base kind":      WorkbenchRef("image", "s1", "l1"),
	} {
		if other == base {
			t.Errorf("%s: same ref", name)
		}
	}
}
