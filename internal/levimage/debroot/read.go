package debroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// ErrNoDpkg: the system has no dpkg database (/var/lib/dpkg/status), so it is not a
// Debian-family system and the default workbench cannot be made from its packages.
var ErrNoDpkg = errors.New("no /var/lib/dpkg/status: not a Debian-family guest")

// ReadInputs reads, from the live system at root (the guest's "/", read by the image
// helper as root), everything Resolve needs: dpkg's status and native architecture, the
// package-state digest (StateDigest, over the same status bytes), every package's file
// list, the root directory's symlinks, the alternatives database and links, and the
// names under /etc/ssl/certs. It is what the guest call it replaced (testdata/gather.sh)
// printed, parsed; the certificate names are in lexical order (find printed them in
// directory order, which nothing depends on). ErrNoDpkg when there is no dpkg status.
func ReadInputs(root string) (Inputs, error) {
	in, _, err := readInputs(root, true)
	return in, err
}

// PlanRoot reads the live system at root as ReadInputs does and plans the closure of
// wanted (Resolve), but reads only the closure's file lists, not every package's: the
// plan uses no other list, and under emulation reading the guest's few hundred lists
// (most of them for packages the workbench does not hold) was most of the image step's
// reading time. The Inputs returned hold the closure's lists alone.
func PlanRoot(root string, wanted []string) (Inputs, *Plan, error) {
	in, pkgs, err := readInputs(root, false)
	if err != nil {
		return Inputs{}, nil, err
	}
	seen, err := closure(newIndex(pkgs, in.Arch), wanted)
	if err != nil {
		return Inputs{}, nil, err
	}
	dir := filepath.Join(root, "var/lib/dpkg/info")
	for _, p := range seen {
		// Resolve's lookup order: the architecture-qualified list first (none for a
		// package whose status names no architecture)
		names := []string{p.Name}
		if p.Arch != "" {
			names = []string{p.Name + ":" + p.Arch, p.Name}
		}
		for _, name := range names {
			lines, ok, err := readList(dir, name)
			if err != nil {
				return Inputs{}, nil, err
			}
			if ok {
				in.Lists[name] = lines
				break
			}
		}
	}
	plan, err := planPaths(in, seen)
	if err != nil {
		return Inputs{}, nil, err
	}
	return in, plan, nil
}

// listName: a package name and architecture as dpkg allows them, the only names
// readList makes a path of (a status file naming "../x" must not read outside info/).
var listName = regexp.MustCompile(`^[a-z0-9][a-z0-9+._-]*(:[a-z0-9][a-z0-9-]*)?$`)

// readList reads info/NAME.list as readLists does: only a regular file (not a symlink, a
// directory or anything else), a line a path; ok is false for an empty or absent list.
func readList(dir, name string) (lines []string, ok bool, _ error) {
	if !listName.MatchString(name) {
		return nil, false, fmt.Errorf("the dpkg status names a package %q: not a package name", name)
	}
	p := filepath.Join(dir, name+".list")
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the packages' file lists: %w", err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, false, fmt.Errorf("reading the packages' file lists: %w", err)
	}
	if len(b) == 0 {
		return nil, false, nil
	}
	return listLines(b), true, nil
}

// listLines are a non-empty .list file's paths, a line each.
func listLines(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// readInputs is ReadInputs, with every package's file list or none (allLists), and the
// parsed status.
func readInputs(root string, allLists bool) (Inputs, []Package, error) {
	status, err := readStatus(root)
	if err != nil {
		return Inputs{}, nil, err
	}
	in := Inputs{Lists: map[string][]string{}, RootLinks: map[string]string{}, AltLinks: map[string]string{}}
	in.StatusSum = stateDigest(root, status)
	in.Status = status
	// the shell's section held the file's lines: a last line without its newline gains one
	if len(status) == 0 || status[len(status)-1] != '\n' {
		in.Status = append(append([]byte(nil), status...), '\n')
	}
	// parsed as Resolve parses it
	pkgs, err := ParseStatus(in.Status)
	if err != nil {
		return Inputs{}, nil, err
	}
	if in.Arch, err = nativeArch(pkgs); err != nil {
		return Inputs{}, nil, err
	}
	if allLists {
		if err := readLists(root, in.Lists); err != nil {
			return Inputs{}, nil, err
		}
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return Inputs{}, nil, err
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink != 0 {
			t, err := os.Readlink(filepath.Join(root, e.Name()))
			if err != nil {
				return Inputs{}, nil, err
			}
			in.RootLinks["/"+e.Name()] = t
		}
	}
	altDir := filepath.Join(root, "etc/alternatives")
	if fi, err := os.Lstat(altDir); err == nil && fi.IsDir() {
		ents, err := os.ReadDir(altDir)
		if err != nil {
			return Inputs{}, nil, fmt.Errorf("reading the alternatives links: %w", err)
		}
		for _, e := range ents {
			if e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			t, err := os.Readlink(filepath.Join(altDir, e.Name()))
			if err != nil {
				return Inputs{}, nil, err
			}
			in.AltLinks[e.Name()] = t
		}
	}
	if in.Alternatives, err = readAlternatives(filepath.Join(root, "var/lib/dpkg/alternatives")); err != nil {
		return Inputs{}, nil, err
	}
	if in.Certs, err = readCerts(root); err != nil {
		return Inputs{}, nil, err
	}
	return in, pkgs, nil
}

// nativeArch is dpkg's native architecture: the architecture of the installed dpkg
// package (dpkg --print-architecture prints the one it was built for, which is that
// package's; dpkg is never co-installed for a second architecture).
func nativeArch(pkgs []Package) (string, error) {
	for _, p := range pkgs {
		if p.Name == "dpkg" && p.Installed && p.Arch != "" && p.Arch != "all" {
			return p.Arch, nil
		}
	}
	return "", fmt.Errorf("the dpkg status lists no installed dpkg package: cannot tell the native architecture")
}

// readLists reads every /var/lib/dpkg/info/*.list that is a regular file into lists, by
// the name without ".list": a line a path, an empty file nothing.
func readLists(root string, lists map[string][]string) error {
	dir := filepath.Join(root, "var/lib/dpkg/info")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading the packages' file lists: %w", err)
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".list")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("reading the packages' file lists: %w", err)
		}
		if len(b) == 0 {
			continue
		}
		lists[name] = append(lists[name], listLines(b)...)
	}
	return nil
}

// readAlternatives reads the update-alternatives groups in dir (every regular file, or
// symlink to one, whose name does not begin with a dot), by name.
func readAlternatives(dir string) ([]Alternative, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the alternatives: %w", err)
	}
	var out []Alternative
	for _, e := range ents {
		n := e.Name()
		p := filepath.Join(dir, n)
		if strings.HasPrefix(n, ".") {
			continue
		}
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading alternative %s: %w", n, err)
		}
		a, err := parseAlternative(n, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// readCerts lists /etc/ssl/certs and everything under it as absolute names (a symlinked
// /etc/ssl/certs is listed alone, not followed); nil when it is not a directory.
func readCerts(root string) ([]string, error) {
	dir := filepath.Join(root, "etc/ssl/certs")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return []string{"/etc/ssl/certs"}, nil // find lists a symlinked start, not its target
	}
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		out = append(out, "/"+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the CA certificates: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

// parseAlternative reads /var/lib/dpkg/alternatives/NAME: the mode, the master link, then
// slave name/link pairs up to a blank line (the choices after it are not needed: the
// current choice is what /etc/alternatives/NAME points to).
func parseAlternative(name string, lines []string) (Alternative, error) {
	if len(lines) < 2 {
		return Alternative{}, fmt.Errorf("alternatives file %s: too short", name)
	}
	a := Alternative{Links: map[string]string{name: lines[1]}}
	for i := 2; i+1 < len(lines) && lines[i] != ""; i += 2 {
		a.Links[lines[i]] = lines[i+1]
	}
	return a, nil
}
