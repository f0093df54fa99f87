package debroot

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// fixture: recorded fragments of this project's Debian 12 machine: /var/lib/dpkg/status
// stanzas (dash's and ca-certificates' dependency chains), dash's and mawk's .list files,
// the head of libc6's, and the awk alternatives group.
func fixture(t *testing.T) Inputs {
	t.Helper()
	read := func(n string) string {
		b, err := os.ReadFile("testdata/" + n)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	lines := func(n string) []string { return strings.Split(strings.TrimSpace(read(n)), "\n") }
	status := read("status.fragment") +
		// synthetic stanzas for the cases a healthy machine does not show
		"Package: gawk\nStatus: deinstall ok config-files\nArchitecture: amd64\nProvides: awk\n\n" +
		"Package: libc6\nStatus: install ok installed\nArchitecture: i386\nMulti-Arch: same\n\n"
	in := Inputs{
		Status: []byte(status),
		Lists: map[string][]string{
			"dash": lines("dash.list"), "mawk": lines("mawk.list"), "libc6:amd64": lines("libc6.list"),
			"libc6:i386": {"/lib/i386-linux-gnu/libc.so.6"},
			"passwd": {"/etc/shadow", "/etc/gshadow-", "/etc/sudoers.d/x", "/etc/ssl/private/ssl-cert-snakeoil.key", "/etc/ssl/private", "/etc/ssh/ssh_host_ed25519_key", "/etc/sudoers.dist",
				"--recursion", "-C/root", "relative/x"},
			"debianutils": {"/usr/share/locale/de/LC_MESSAGES/debianutils.mo", "/usr/share/locale-langpack/x"},
		},
		RootLinks: map[string]string{"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"},
		AltLinks: map[string]string{"awk": "/usr/bin/mawk", "awk.1.gz": "/usr/share/man/man1/mawk.1.gz",
			"nawk": "/usr/bin/mawk", "vi": "/usr/bin/vim.basic"},
		Certs: []string{"/etc/ssl/certs", "/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ISRG_Root_X1.pem", "/etc/ssl/certs/4042bcee.0",
			"/etc/ssl/certs/java", "/etc/ssl/certs/java/cacerts", "/etc/ssl/certs/notes.txt", "/etc/ssl/certs/../private/k.pem"},
		Arch: "amd64",
	}
	a, err := parseAlternative("awk", lines("alt-awk"))
	if err != nil {
		t.Fatal(err)
	}
	in.Alternatives = []Alternative{a, {Links: map[string]string{"vi": "/usr/bin/vi"}}}
	// every other package in the fragment gets a one-file list so the closure can be listed
	pkgs, err := ParseStatus(in.Status)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if _, ok := in.Lists[p.Name]; !ok && p.Name != "libc6" {
			in.Lists[p.Name] = []string{"/usr/share/" + p.Name + "/marker"}
		}
	}
	return in
}

func TestResolveClosure(t *testing.T) {
	libs := []string{"dpkg", "gcc-12-base", "libacl1", "libbz2-1.0", "libc6", "libgcc-s1", "liblzma5", "libmd0", "libpcre2-8-0", "libselinux1", "libzstd1", "tar", "zlib1g"}
	cases := []struct {
		name   string
		wanted []string
		want   []string // packages, sorted
		err    string
	}{
		// dash: Depends debianutils, dpkg; Pre-Depends libc6 (whose Depends libgcc-s1 ->
		// gcc-12-base); dpkg's Pre-Depends pull the compression libraries, its Depends tar.
		{name: "pre-depends and depends", wanted: []string{"dash"},
			want: append([]string{"dash", "debianutils"}, libs...)},
		// ca-certificates: "debconf (>= 0.5) | debconf-2.0": the first installed alternative.
		{name: "alternatives take the first installed", wanted: []string{"ca-certificates"},
			want: []string{"ca-certificates", "debconf", "gcc-12-base", "libc6", "libgcc-s1", "libssl3", "openssl"}},
		// awk is virtual: mawk provides it; gawk provides it too but only its config files
		// are left, so it does not count.
		{name: "virtual package via Provides, installed providers only", wanted: []string{"awk"},
			want: []string{"gcc-12-base", "libc6", "libgcc-s1", "mawk"}},
		{name: "wanted alternatives", wanted: []string{"gawk|mawk"},
			want: []string{"gcc-12-base", "libc6", "libgcc-s1", "mawk"}},
		{name: "virtual provided by a real package's Provides: libz1", wanted: []string{"libz1"},
			want: []string{"gcc-12-base", "libc6", "libgcc-s1", "zlib1g"}},
		{name: "perl-base: Pre-Depends on libcrypt1 and dpkg", wanted: []string{"perl-base"},
			want: append([]string{"libcrypt1", "perl-base"}, libs...)},
		{name: "missing wanted package is named", wanted: []string{"make", "git"}, err: "package git is not installed"},
		{name: "config-files package is not installed", wanted: []string{"gawk"}, err: "package gawk is not installed"},
		{name: "missing alternatives named together", wanted: []string{"gawk|original-awk"}, err: "gawk | original-awk is not installed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Resolve(fixture(t), tc.wanted)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(tc.want)
			if !reflect.DeepEqual(p.Packages, tc.want) {
				t.Errorf("packages\n got %v\nwant %v", p.Packages, tc.want)
			}
		})
	}
}

func TestResolveBrokenDependency(t *testing.T) {
	in := fixture(t)
	in.Status = append(in.Status, []byte("Package: broken\nStatus: install ok installed\nArchitecture: all\nDepends: nosuch (>= 1) | alsono\n\n")...)
	in.Lists["broken"] = []string{"/x"}
	_, err := Resolve(in, []string{"broken"})
	if err == nil || !strings.Contains(err.Error(), "package broken depends on nosuch | alsono") {
		t.Fatalf("err %v", err)
	}
}

func TestResolvePaths(t *testing.T) {
	in := fixture(t)
	in.Status = append(in.Status, []byte("Package: passwd\nStatus: install ok installed\nArchitecture: amd64\n\n")...)
	p, err := Resolve(in, []string{"dash", "mawk", "passwd"})
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, x := range p.Paths {
		has[x] = true
	}
	cases := []struct {
		path string
		want bool
	}{
		{"usr/bin/dash", true}, // /bin/dash through /bin -> usr/bin
		{"usr/bin/sh", true},   // /bin/sh likewise
		{"bin", true},          // the root link itself, copied as a link
		{"bin/dash", false},    // never under a symlinked directory
		{"bin/sh", false},      // likewise
		{"usr/lib/x86_64-linux-gnu/libc.so.6", true},
		{"lib/x86_64-linux-gnu/libc.so.6", false},
		{"usr/lib/i386-linux-gnu/libc.so.6", false}, // the foreign-arch libc6 is not picked
		{"usr/bin/awk", true},                       // alternatives: public link whose target is in
		{"etc/alternatives/awk", true},              // ... and its hop
		{"usr/bin/nawk", true},                      // slave links count too
		{"etc/alternatives/vi", false},              // target not in the image
		{"usr/share/doc/dash/copyright", true},
		{"usr/share/doc/dash/changelog.gz", false}, // documentation is dropped
		{"usr/share/man/man1/dash.1.gz", false},
		{"etc/alternatives/awk.1.gz", false}, // its target is a dropped man page
		{"usr/share/lintian/overrides/dash", false},
		{"usr/share/locale/de/LC_MESSAGES/debianutils.mo", false}, // translations are dropped
		{"usr/share/locale-langpack/x", true},                     // a prefix, not a directory match
		{"usr", true}, {"usr/share", true}, {"etc", true},         // parents
		{"", false}, {".", false}, {"/", false},
		// the certificate directory: what update-ca-certificates writes, nothing else
		{"etc/ssl/certs/ca-certificates.crt", true}, {"etc/ssl/certs/ISRG_Root_X1.pem", true}, {"etc/ssl/certs/4042bcee.0", true},
		{"etc/ssl/certs/java/cacerts", false}, {"etc/ssl/certs/notes.txt", false}, {"etc/ssl/private/k.pem", false},
		// secrets are never copied, whoever lists them; a name that only starts alike is
		{"etc/shadow", false}, {"etc/gshadow-", false}, {"etc/sudoers.d/x", false}, {"etc/ssl/private", true},
		{"etc/ssl/private/ssl-cert-snakeoil.key", false},
		// a list line that is not an absolute path never reaches tar (it could be an option)
		{"--recursion", false}, {"-C/root", false}, {"relative/x", false}, {"etc/ssh/ssh_host_ed25519_key", false}, {"etc/sudoers.dist", true},
	}
	for _, tc := range cases {
		if has[tc.path] != tc.want {
			t.Errorf("%q in plan = %v, want %v", tc.path, has[tc.path], tc.want)
		}
	}
	if !sort.StringsAreSorted(p.Paths) {
		t.Error("paths not sorted")
	}
	links := []string{"bin", "lib", "lib64", "sbin"}
	for _, x := range p.Paths {
		for _, l := range links {
			if strings.HasPrefix(x, l+"/") {
				t.Errorf("%s sits under the symlinked /%s", x, l)
			}
		}
		if strings.HasPrefix(x, "/") {
			t.Errorf("%s is absolute", x)
		}
	}
}

func TestResolveDeterministic(t *testing.T) {
	in := fixture(t)
	first, err := Resolve(in, []string{"dash", "mawk", "ca-certificates"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ { // map iteration order varies between runs
		again, err := Resolve(fixture(t), []string{"ca-certificates", "mawk", "dash"})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, again) {
			t.Fatal("plans differ between identical inputs")
		}
	}
}

func TestCanonicalizer(t *testing.T) {
	c := canonicalizer(map[string]string{"/bin": "usr/bin", "/lib64": "/usr/lib64", "/a": "b", "/b": "c/d"})
	cases := map[string]string{
		"/bin/sh": "usr/bin/sh", "/bin": "bin", "/lib64/ld.so": "usr/lib64/ld.so",
		"/a/x":                  "c/d/x", // chained links
		"/usr/bin/../../bin/sh": "usr/bin/sh", "relative": "", "/etc/../bin/x": "usr/bin/x",
	}
	for in, want := range cases {
		if got := c(in); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
	loop := canonicalizer(map[string]string{"/x": "y", "/y": "x"})
	_ = loop("/x/z") // a cycle ends (bounded), whatever it returns
}

func TestParseStatusErrors(t *testing.T) {
	cases := map[string]string{
		"Status: install ok installed\n\n": "no Package field",
		" continuation\n":                  "continuation line",
		"Package: a\nnot a field\n":        "is not a field",
		"Package: a\nDepends: b, , c\n":    "empty alternative",
	}
	for in, want := range cases {
		if _, err := ParseStatus([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
}
