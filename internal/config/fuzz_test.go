package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzLoad feeds the loader arbitrary bytes. It must never panic, and every failure must
// be a list of problems each naming a line that exists in the input. A success must be a
// config that validation would pass again. Seeds: testdata/fuzz/FuzzLoad plus the cases
// below; run longer with `go test -fuzz FuzzLoad ./internal/config`.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(base))
	f.Add(Default)
	f.Add([]byte(base + "workers:\n  - name: w\n    dir: a\n    llm_auth: subscription\negress: closed\n"))
	f.Add([]byte(base + "manager:\n  allow_ports: [1, 7444, 65536]\n  read_only: [../x]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("name: \"\\u0000\"\n"))
	f.Add([]byte("\xff\xfe"))

	dir, err := filepath.EvalSymlinks(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	for _, d := range []string{"proj/a", "proj/b"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte("k"), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Setenv("LEVER_STATE_DIR", filepath.Join(f.TempDir(), "state"))
	path := filepath.Join(dir, "lever.yaml")

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(path, data)
		if err == nil {
			if c == nil || !nameRE.MatchString(c.Name) || !slices.Contains(Backends, c.Backend) || c.TreePath == "" {
				t.Fatalf("accepted an invalid config: %+v", c)
			}
			return
		}
		if c != nil {
			t.Fatalf("failed load returned a config")
		}
		var ps Problems
		if !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("error is not a list of problems: %T %v", err, err)
		}
		lines := yamlLines(data)
		for _, p := range ps {
			if p.Line < 1 || p.Line > lines {
				t.Fatalf("problem names line %d of a %d-line input: %v", p.Line, lines, p)
			}
			if !strings.HasPrefix(p.Error(), fmt.Sprintf("%s:%d: ", path, p.Line)) {
				t.Fatalf("problem does not start with file:line: %q", p.Error())
			}
		}
	})
}

// yamlLines counts lines the way YAML does: CRLF, LF, CR, NEL, LS and PS each end one.
func yamlLines(data []byte) int {
	s := strings.ReplaceAll(string(data), "\r\n", "\n")
	n := 1
	for _, r := range s {
		switch r {
		case '\n', '\r', 0x85, 0x2028, 0x2029:
			n++
		}
	}
	return n
}
