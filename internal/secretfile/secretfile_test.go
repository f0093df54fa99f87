package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// content is what the files hold; no error may quote it.
const content = "tok-9f3a71c2"

// TestReadRefusesWhatIsNotAPrivateFile: each row puts something at the name Read is given;
// only the control, a 0600 file of the user's own, is read.
func TestReadRefusesWhatIsNotAPrivateFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		want string // "" for the control
	}{
		{"0600 file of one's own (control)", func(t *testing.T, p string) { write(t, p, content, 0o600) }, ""},
		{"group-readable", func(t *testing.T, p string) { write(t, p, content, 0o640) }, "has mode 0640"},
		{"world-readable", func(t *testing.T, p string) { write(t, p, content, 0o604) }, "has mode 0604"},
		{"symlink to a 0600 file", func(t *testing.T, p string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			write(t, target, content, 0o600)
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link"},
		{"directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"FIFO", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"owned by another user", func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			write(t, p, content, 0o600)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
		{"over the cap", func(t *testing.T, p string) { write(t, p, strings.Repeat("k", Max+1), 0o600) }, "larger than"},
		{"missing", func(*testing.T, string) {}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "key")
			tc.make(t, p)
			data, err := Read(p)
			if tc.want == "" {
				if err != nil || string(data) != content {
					t.Fatalf("control: %q, %v", data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("got %q, %v; want an error naming %s and saying %q", data, err, p, tc.want)
			}
			if strings.Contains(err.Error(), content) {
				t.Errorf("the error quotes the contents: %v", err)
			}
		})
	}
}

// TestReadIsFromTheCheckedDescriptor: a file put in place of the name after it was opened
// (here a world-readable one, which the checks would refuse) is not what is read; what the
// checks passed is. Reading the name again after the checks would return "swapped".
func TestReadIsFromTheCheckedDescriptor(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	write(t, p, "checked", 0o600)
	f, err := Open(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other := filepath.Join(dir, "other")
	write(t, other, "swapped", 0o644)
	if err := os.Rename(other, p); err != nil {
		t.Fatal(err)
	}
	data, err := readChecked(f, p)
	if err != nil || string(data) != "checked" {
		t.Fatalf("read %q, %v; want the opened file's contents", data, err)
	}
	// Control: the name now holds the swapped file, which Read refuses on its own.
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "has mode 0644") {
		t.Fatalf("control: Read of the swapped-in file: %v", err)
	}
}

func write(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
