package levstate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCovers: every spelling of a protected path (relative, .., a symlinked parent, a
// hard link elsewhere) is recognised; an ordinary file beside them is not.
func TestCovers(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(root, "home")
	os.MkdirAll(filepath.Join(home, "runs"), 0o700)
	os.WriteFile(filepath.Join(home, "token"), []byte("tok"), 0o600)
	keyDir := filepath.Join(root, "keys")
	os.MkdirAll(keyDir, 0o700)
	os.WriteFile(filepath.Join(keyDir, "client.key"), []byte("key"), 0o600)
	os.WriteFile(filepath.Join(keyDir, "other.txt"), []byte("x"), 0o600)
	os.Symlink(home, filepath.Join(root, "homelink"))
	os.Link(filepath.Join(home, "token"), filepath.Join(root, "hard"))
	os.Link(filepath.Join(keyDir, "client.key"), filepath.Join(root, "hardkey"))
	t.Chdir(root)
	// The home given relative and through a symlink: it must still protect the real one.
	s, err := New("homelink", map[string]string{"keys/client.key": "the provider's TLS key"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Home != home {
		t.Fatalf("home %q, want %q", s.Home, home)
	}
	cases := []struct {
		path string
		want bool
	}{
		{filepath.Join(home, "token"), true},
		{filepath.Join(home, "runs", "r-1", "run.json"), true},
		{home, true},
		{filepath.Join(keyDir, "client.key"), true},
		{filepath.Join(keyDir, "other.txt"), false},
		{root, false},
		{home + "x", false},
	}
	for _, tc := range cases {
		if _, got := s.Covers(tc.path); got != tc.want {
			t.Errorf("Covers(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
	for _, tc := range []struct {
		path string
		want bool
	}{{"hard", true}, {"hardkey", true}, {filepath.Join(keyDir, "other.txt"), false}} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if what, got := s.CoversFile(fi); got != tc.want {
			t.Errorf("CoversFile(%s) = %v (%s), want %v", tc.path, got, what, tc.want)
		}
	}
	if in := s.Inside(root); len(in) != 2 || !strings.Contains(in[0].What+in[1].What, "TLS key") {
		t.Errorf("Inside(root) = %+v", in)
	}
}

// TestGrantableRead: only lev's run records (and nothing nested in them that is protected
// on its own) may be opened by a grant; the token, config and home are never grantable.
func TestGrantableRead(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(root, "home")
	runs := filepath.Join(home, "runs")
	os.MkdirAll(filepath.Join(runs, "r-1"), 0o700)
	os.WriteFile(filepath.Join(home, "token"), []byte("tok"), 0o600)
	inner := filepath.Join(runs, "keys")
	s, err := New(home, map[string]string{runs: "lev's run records", inner: "a key kept among the records"})
	if err != nil {
		t.Fatal(err)
	}
	if s.GrantableRead(filepath.Join(runs, "r-1", "run.json")) {
		t.Fatal("records grantable before SetRecords")
	}
	if err := s.SetRecords(runs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{filepath.Join(runs, "r-1", "run.json"), true},
		{runs, true},
		{filepath.Join(home, "token"), false},
		{filepath.Join(home, "config.toml"), false},
		{home, false},
		{filepath.Join(inner, "client.key"), false},
		{filepath.Join(root, "elsewhere"), false},
	} {
		if got := s.GrantableRead(tc.path); got != tc.want {
			t.Errorf("GrantableRead(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestCoversFileAsTheFilesAreNow: lev rewrites a state file by rename, which gives its name
// a new inode and frees the old one. A hard link to the new file is lev's; a file that
// merely got the freed inode number (one name, in the tree) is not: CoversFile compares
// with lev's files as they are when asked (a set of inodes taken once refused a fresh
// write_file whose inode the filesystem had reused: TestHostCommandsNetns).
func TestCoversFileAsTheFilesAreNow(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(root, "home")
	os.MkdirAll(home, 0o700)
	labels := filepath.Join(home, "taint-labels.json")
	os.WriteFile(labels, []byte("{}"), 0o600)
	s, err := New(home, nil)
	if err != nil {
		t.Fatal(err)
	}
	stat := func(p string) os.FileInfo {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	old := stat(labels)
	// Rewritten by rename, as lev does: a new inode under the same name.
	tmp := filepath.Join(home, ".labels.tmp")
	os.WriteFile(tmp, []byte(`{"a":1}`), 0o600)
	if err := os.Rename(tmp, labels); err != nil {
		t.Fatal(err)
	}
	if os.SameFile(old, stat(labels)) {
		t.Fatal("control: the rename kept the inode")
	}
	link := filepath.Join(root, "link")
	if err := os.Link(labels, link); err != nil {
		t.Fatal(err)
	}
	if what, ok := s.CoversFile(stat(link)); !ok || !strings.Contains(what, "taint-labels.json") {
		t.Errorf("a hard link to the rewritten file: CoversFile = %v (%s), want lev's", ok, what)
	}
	// The old identity, now nobody's state: a one-name file with it (a fresh file that got
	// the freed inode) is not lev's. old still describes the freed inode.
	if what, ok := s.CoversFile(old); ok {
		t.Errorf("the replaced file's old identity: CoversFile = true (%s), want false", what)
	}
}
