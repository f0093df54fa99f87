package debroot

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// Inputs are what ReadInputs read from the guest's live system.
type Inputs struct {
	// Status is /var/lib/dpkg/status.
	Status []byte
	// StatusSum is StateDigest over the same status bytes (the digest the observe call's
	// state_digest prints, so a warm bring-up finds the tag without this read).
	StatusSum string
	// Lists maps a .list file's name without ".list" ("bash", "libc6:amd64") to the paths
	// it names.
	Lists map[string][]string
	// RootLinks are the root directory's symlinks to directories ("/bin" -> "usr/bin" on a
	// merged-/usr system).
	RootLinks map[string]string
	// Alternatives are update-alternatives groups (/var/lib/dpkg/alternatives/*).
	Alternatives []Alternative
	// AltLinks maps a name in /etc/alternatives to its link target.
	AltLinks map[string]string
	// Certs are the paths under /etc/ssl/certs, which update-ca-certificates generates
	// (no .list names them).
	Certs []string
	// Arch is dpkg's native architecture.
	Arch string
}

// Alternative is one update-alternatives group: each name (master and slaves) with the
// public link it manages ("awk" -> "/usr/bin/awk").
type Alternative struct {
	Links map[string]string
}

// Plan is the planned root file system.
type Plan struct {
	// Packages is the closure, sorted.
	Packages []string
	// Paths are the paths to copy, relative to /, canonical (no entry under a root
	// symlink), every parent directory included, sorted (parents before children).
	Paths []string
}

// skipped: documentation and message translations a workbench does not need (copyright
// files are kept). Translations alone were 36 MiB of the 180 MiB first measured.
var skipped = []string{"/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/lintian/", "/usr/share/locale/"}

// Resolve computes the closure of wanted (each entry may list alternatives, "mawk|gawk")
// over Depends and Pre-Depends, and the canonical list of files to copy.
func Resolve(in Inputs, wanted []string) (*Plan, error) {
	pkgs, err := ParseStatus(in.Status)
	if err != nil {
		return nil, err
	}
	seen, err := closure(newIndex(pkgs, in.Arch), wanted)
	if err != nil {
		return nil, err
	}
	return planPaths(in, seen)
}

// closure is the set of installed packages wanted names, with everything they depend on
// (Depends and Pre-Depends), by name.
func closure(ix *index, wanted []string) (map[string]*Package, error) {
	seen := map[string]*Package{}
	var queue []*Package
	for _, w := range wanted {
		alts := strings.Split(w, "|")
		for i := range alts {
			alts[i] = strings.TrimSpace(alts[i])
		}
		p := ix.pick(alts)
		if p == nil {
			return nil, fmt.Errorf("package %s is not installed in the guest (it is needed in the workbench image; install it there or set lev.base_image / lev.base_tarball)", strings.Join(alts, " | "))
		}
		if seen[p.Name] == nil {
			seen[p.Name] = p
			queue = append(queue, p)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		groups := append(append([][]string(nil), p.PreDepends...), p.Depends...)
		for _, g := range groups {
			d := ix.pick(g)
			if d == nil {
				return nil, fmt.Errorf("package %s depends on %s, which is not installed in the guest (a broken dpkg database?)", p.Name, strings.Join(g, " | "))
			}
			if seen[d.Name] == nil {
				seen[d.Name] = d
				queue = append(queue, d)
			}
		}
	}
	return seen, nil
}

// planPaths is the plan of the closure seen: its packages, and the canonical paths of
// their files, the alternatives and certificates among them, and every parent.
func planPaths(in Inputs, seen map[string]*Package) (*Plan, error) {
	plan := &Plan{}
	for n := range seen {
		plan.Packages = append(plan.Packages, n)
	}
	sort.Strings(plan.Packages)

	canon := canonicalizer(in.RootLinks)
	set := map[string]bool{}
	add := func(p string) {
		c := canon(p)
		if c == "" || c == "/" || secret(c) {
			return
		}
		set[c] = true
	}
	for _, n := range plan.Packages {
		p := seen[n]
		list, ok := in.Lists[n+":"+p.Arch]
		if !ok {
			list, ok = in.Lists[n]
		}
		if !ok {
			return nil, fmt.Errorf("package %s has no file list in /var/lib/dpkg/info", n)
		}
		for _, f := range list {
			if skip(f) {
				continue
			}
			add(f)
		}
	}
	// update-alternatives links whose chosen target is in the image: the public link
	// (/usr/bin/awk) and its /etc/alternatives hop. No .list names either.
	for _, a := range in.Alternatives {
		names := make([]string, 0, len(a.Links))
		for n := range a.Links {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			target, ok := in.AltLinks[n]
			if !ok || !path.IsAbs(target) || skip(target) || !set[canon(target)] {
				continue
			}
			add(a.Links[n])
			add("/etc/alternatives/" + n)
		}
	}
	for _, c := range in.Certs {
		if certName.MatchString(c) {
			add(c)
		}
	}
	// The root symlinks themselves, so /bin/sh resolves through /bin -> usr/bin.
	for l := range in.RootLinks {
		set[strings.TrimPrefix(path.Clean("/"+l), "/")] = true
	}
	// Every parent directory, so the layer is complete whatever the lists omit.
	for p := range set {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			set[d] = true
		}
	}
	for p := range set {
		plan.Paths = append(plan.Paths, p)
	}
	sort.Strings(plan.Paths)
	return plan, nil
}

// never: guest paths that may hold secrets or host state, refused whatever a package list
// or the certificate directory names (the workbench is readable by every agent tool).
var never = []string{"etc/shadow", "etc/gshadow", "etc/shadow-", "etc/gshadow-", "etc/sudoers",
	"etc/sudoers.d/", "etc/ssl/private/", "etc/ssh/", "root/", "home/", "run/", "tmp/", "var/lib/lever/", "var/tmp/"}

// secret reports whether the canonical relative path c is (under) a never entry.
func secret(c string) bool {
	for _, n := range never {
		if strings.HasSuffix(n, "/") {
			if strings.HasPrefix(c+"/", n) && c+"/" != n {
				return true
			}
		} else if c == n {
			return true
		}
	}
	return false
}

// certName: what update-ca-certificates writes: *.pem and *.crt links and files, and
// OpenSSL's hash links (*.0, *.1 ...). Anything else an administrator dropped there is
// not copied.
var certName = regexp.MustCompile(`^/etc/ssl/certs(/[^/]+\.(pem|crt|[0-9]+))?$`)

func skip(p string) bool {
	for _, s := range skipped {
		if strings.HasPrefix(p, s) {
			return !(s == "/usr/share/doc/" && path.Base(p) == "copyright")
		}
	}
	return false
}

// canonicalizer maps an absolute path through the root symlinks ("/bin/sh" ->
// "usr/bin/sh" when /bin -> usr/bin) and returns it relative to / ("" for an unusable
// path). A path that IS a root symlink stays itself (the link is copied as a link).
func canonicalizer(links map[string]string) func(string) string {
	clean := map[string]string{}
	for l, t := range links {
		l = path.Clean("/" + l)
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(l), t)
		}
		clean[l] = path.Clean(t)
	}
	return func(p string) string {
		if !path.IsAbs(p) {
			return ""
		}
		p = path.Clean(p)
		// A link can point into another link's directory: map until stable (bounded,
		// so a cycle cannot hang the planner).
		for i := 0; i < 8; i++ {
			changed := false
			for l, t := range clean {
				if rest, ok := strings.CutPrefix(p, l+"/"); ok {
					p, changed = path.Join(t, rest), true
				}
			}
			if !changed {
				break
			}
		}
		return strings.TrimPrefix(p, "/")
	}
}

// index finds installed packages by name or by a virtual name they provide.
type index struct {
	byName    map[string][]*Package
	providers map[string][]*Package
	arch      string
}

func newIndex(pkgs []Package, arch string) *index {
	ix := &index{byName: map[string][]*Package{}, providers: map[string][]*Package{}, arch: arch}
	for i := range pkgs {
		p := &pkgs[i]
		if !p.Installed {
			continue
		}
		ix.byName[p.Name] = append(ix.byName[p.Name], p)
		for _, v := range p.Provides {
			ix.providers[v] = append(ix.providers[v], p)
		}
	}
	for _, m := range []map[string][]*Package{ix.byName, ix.providers} {
		for _, ps := range m {
			sort.Slice(ps, func(i, j int) bool { return ix.rank(ps[i]) < ix.rank(ps[j]) })
		}
	}
	return ix
}

// rank orders candidates: the native architecture, then "all", then the rest, then by
// name, so the choice is deterministic.
func (ix *index) rank(p *Package) string {
	r := "2"
	switch p.Arch {
	case ix.arch:
		r = "0"
	case "all":
		r = "1"
	}
	return r + p.Name + ":" + p.Arch
}

// pick returns the first alternative satisfied by an installed package (a real package
// of that name first, else a provider of that virtual name), or nil.
func (ix *index) pick(alts []string) *Package {
	for _, a := range alts {
		if ps := ix.byName[a]; len(ps) > 0 {
			return ps[0]
		}
		if ps := ix.providers[a]; len(ps) > 0 {
			return ps[0]
		}
	}
	return nil
}
