// Package debroot plans a container root file system from a Debian guest's own installed
// packages: it parses dpkg's status database, computes the dependency closure of the
// packages a workbench needs, and lists the exact paths to copy. The planner is pure (no
// I/O): the guest's files come in as Inputs, so every decision is table-tested on
// recorded fragments of a real dpkg database. ReadInputs and StateDigest are its only
// readers, run by the image helper in the guest as root (lev __guest images): bring-up
// on the host never reads the host's own files with them. Nothing here installs
// anything.
package debroot

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Package is one stanza of /var/lib/dpkg/status.
type Package struct {
	Name string
	Arch string
	// Installed: the Status field's third word is "installed" (half-installed, config-files
	// and not-installed packages have no usable files).
	Installed bool
	// Depends and PreDepends are lists of alternatives ("a | b, c" -> [[a b] [c]]), names
	// only: the installed system is consistent, so version constraints are not re-checked.
	Depends    [][]string
	PreDepends [][]string
	// Provides are the virtual package names this package provides.
	Provides []string
}

// ParseStatus reads a dpkg status file. A stanza without a Package field is an error
// naming its line: a truncated read must not silently drop packages.
func ParseStatus(data []byte) ([]Package, error) {
	var out []Package
	var cur *Package
	var field string
	fields := map[string]string{}
	start, line := 0, 0
	flush := func() error {
		if len(fields) == 0 {
			return nil
		}
		defer func() { fields = map[string]string{} }()
		name := strings.TrimSpace(fields["package"])
		if name == "" {
			return fmt.Errorf("dpkg status: stanza at line %d has no Package field", start)
		}
		cur = &Package{Name: name, Arch: strings.TrimSpace(fields["architecture"])}
		st := strings.Fields(fields["status"])
		cur.Installed = len(st) == 3 && st[2] == "installed"
		var err error
		if cur.Depends, err = parseDeps(fields["depends"]); err != nil {
			return fmt.Errorf("dpkg status: package %s: Depends: %w", name, err)
		}
		if cur.PreDepends, err = parseDeps(fields["pre-depends"]); err != nil {
			return fmt.Errorf("dpkg status: package %s: Pre-Depends: %w", name, err)
		}
		provs, err := parseDeps(fields["provides"])
		if err != nil {
			return fmt.Errorf("dpkg status: package %s: Provides: %w", name, err)
		}
		for _, p := range provs {
			cur.Provides = append(cur.Provides, p...)
		}
		out = append(out, *cur)
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line++
		l := sc.Text()
		if strings.TrimSpace(l) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			field = ""
			continue
		}
		if len(fields) == 0 {
			start = line
		}
		if l[0] == ' ' || l[0] == '\t' {
			if field == "" {
				return nil, fmt.Errorf("dpkg status: line %d: continuation line with no field", line)
			}
			fields[field] += " " + strings.TrimSpace(l)
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("dpkg status: line %d: %q is not a field", line, l)
		}
		field = strings.ToLower(k)
		fields[field] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dpkg status: %w", err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// parseDeps parses a dependency field into alternatives of bare names: version
// constraints "(>= 1)", architecture qualifiers ":any"/":native" and restriction lists
// "[amd64]" / "<!nocheck>" are dropped.
func parseDeps(v string) ([][]string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	var out [][]string
	for _, group := range strings.Split(v, ",") {
		var alts []string
		for _, a := range strings.Split(group, "|") {
			name := depName(a)
			if name == "" {
				return nil, fmt.Errorf("empty alternative in %q", strings.TrimSpace(group))
			}
			alts = append(alts, name)
		}
		out = append(out, alts)
	}
	return out, nil
}

func depName(a string) string {
	a = strings.TrimSpace(a)
	if i := strings.IndexAny(a, " (<["); i >= 0 {
		a = a[:i]
	}
	// "perl:any", "libc6:amd64": the planner resolves by name within the guest.
	if n, _, ok := strings.Cut(a, ":"); ok {
		a = n
	}
	return a
}
