package debroot

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
)

// ReadInputs and StateDigest replaced a guest call (testdata/gather.sh, with
// statedigest.sh's state_digest): the tests run those scripts on this machine (a Debian
// one) and on small fake roots, their paths moved under the root, and the Go readers must
// read exactly what the scripts' answers said. parseGather is the parser the host used.

// shellOracle skips a test where the scripts cannot run as on a guest (GNU find's -printf,
// dpkg).
func shellOracle(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the reference scripts need a Linux guest's tools (GNU find, dpkg)")
	}
	out, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Skipf("no dpkg here: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// rooted moves a script's absolute paths under root ("/" leaves it as it is).
func rooted(script, root string) string {
	if root == "/" {
		return script
	}
	return strings.NewReplacer("/var/lib/dpkg", root+"/var/lib/dpkg", "/etc/", root+"/etc/",
		"find / -mindepth", "find "+root+"/ -mindepth").Replace(script)
}

// shellDigest is state_digest's output for root.
func shellDigest(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("sh", "-s")
	cmd.Stdin = strings.NewReader(rooted(StateDigestPart, root) + "\nstate_digest\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("state_digest: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// shellGather is the gather script's answer for root, parsed as the host did (certificate
// names sorted: find printed them in directory order); exit 3 is ErrNoDpkg.
func shellGather(t *testing.T, root string) (Inputs, error) {
	t.Helper()
	gather, err := os.ReadFile("testdata/gather.sh")
	if err != nil {
		t.Fatal(err)
	}
	sc := guest.NewScript(rooted(StateDigestPart, root), rooted(string(gather), root))
	cmd := exec.Command("sh", "-s")
	cmd.Stdin = strings.NewReader(sc.Text())
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		return Inputs{}, ErrNoDpkg
	}
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	secs, err := sc.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	in, err := parseGather(secs)
	if err != nil {
		t.Fatal(err)
	}
	if root != "/" {
		for i, c := range in.Certs {
			in.Certs[i] = strings.TrimPrefix(c, root)
		}
	}
	sort.Strings(in.Certs)
	return in, nil
}

// TestReadInputsMatchesGatherHere: on this machine's own dpkg database (thousands of
// paths, the real alternatives and certificates) ReadInputs reads what the gather script
// printed, and StateDigest is state_digest's output.
func TestReadInputsMatchesGatherHere(t *testing.T) {
	shellOracle(t)
	want, err := shellGather(t, "/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadInputs("/")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadInputs(/) differs from the gather script's answer:\n%s", inputsDiff(got, want))
	}
	sum, err := StateDigest("/")
	if err != nil || sum != shellDigest(t, "/") || sum != want.StatusSum {
		t.Errorf("StateDigest(/) = %q %v, state_digest %q", sum, err, shellDigest(t, "/"))
	}
	paths := 0
	for _, l := range got.Lists {
		paths += len(l)
	}
	t.Logf("this machine: %d file lists, %d paths, %d alternatives, %d certificate names, arch %s", len(got.Lists), paths, len(got.Alternatives), len(got.Certs), got.Arch)
	if len(got.Lists) < 20 || paths < 1000 || got.Arch == "" {
		t.Errorf("this machine's dpkg database looks empty: the comparison above proves little")
	}
}

// inputsDiff names the fields that differ.
func inputsDiff(got, want Inputs) string {
	var b strings.Builder
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < gv.NumField(); i++ {
		if !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
			g, w := fmt.Sprint(gv.Field(i).Interface()), fmt.Sprint(wv.Field(i).Interface())
			if len(g) > 400 {
				g = g[:400] + "..."
			}
			if len(w) > 400 {
				w = w[:400] + "..."
			}
			fmt.Fprintf(&b, "%s:\n  read   %s\n  script %s\n", gv.Type().Field(i).Name, g, w)
		}
	}
	return b.String()
}

// fakeRoot is a small Debian-like root: dpkg's database (dpkg and dash installed, with
// their lists), a merged-/usr link, CA certificates and the awk alternative.
func fakeRoot(t *testing.T, arch string) string {
	t.Helper()
	root := t.TempDir()
	alt, err := os.ReadFile("testdata/alt-awk")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"var/lib/dpkg/status": "Package: dpkg\nStatus: install ok installed\nArchitecture: " + arch + "\nVersion: 1\n\n" +
			"Package: dash\nStatus: install ok installed\nArchitecture: " + arch + "\nDepends: libc6\n\n",
		"var/lib/dpkg/info/dpkg.list":          "/.\n/usr\n/usr/bin\n/usr/bin/dpkg\n",
		"var/lib/dpkg/info/dash.list":          "/.\n/bin\n/bin/dash\n/usr/share/man/man1/dash.1.gz\n",
		"var/lib/dpkg/info/dash.md5sums":       "0 usr/bin/dash\n",
		"var/lib/dpkg/alternatives/awk":        string(alt),
		"var/lib/dpkg/alternatives/.hidden":    "auto\n/usr/bin/hidden\n\n",
		"etc/ssl/certs/ca-certificates.crt":    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
		"etc/ssl/certs/ISRG_Root_X1.pem":       "pem\n",
		"etc/ssl/certs/java/cacerts":           "jks",
		"etc/alternatives/README":              "not a link\n",
		"usr/bin/mawk":                         "mawk",
		"usr/bin/dash":                         "dash",
		"usr/share/man/man1/mawk.1.gz":         "man",
		"var/lib/dpkg/info/not-a-list.listing": "/usr/bin/x\n",
	}
	for p, body := range files {
		mkfile(t, filepath.Join(root, p), body)
	}
	for link, target := range map[string]string{
		"bin":                                "usr/bin",
		"lib":                                "usr/lib",
		"etc/ssl/certs/4042bcee.0":           "ISRG_Root_X1.pem",
		"etc/alternatives/awk":               "/usr/bin/mawk",
		"etc/alternatives/awk.1.gz":          "/usr/share/man/man1/mawk.1.gz",
		"etc/alternatives/nawk":              "/usr/bin/mawk",
		"var/lib/dpkg/alternatives/awk-link": "awk",
	} {
		mklink(t, target, filepath.Join(root, link))
	}
	if err := os.MkdirAll(filepath.Join(root, "var/lib/dpkg/alternatives/subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func mkfile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mklink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// TestReadInputsFakeRoots: on small roots, one thing different per row, ReadInputs reads
// what the gather script printed and StateDigest is state_digest's output, byte for byte.
func TestReadInputsFakeRoots(t *testing.T) {
	arch := shellOracle(t)
	rm := func(ps ...string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			for _, p := range ps {
				if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cases := []struct {
		name   string
		change func(t *testing.T, root string)
		noDpkg bool
		check  func(t *testing.T, in Inputs) // on top of the comparison with the scripts
	}{
		{"everything", func(*testing.T, string) {}, false, func(t *testing.T, in Inputs) {
			// the positive control: each kind of input is really read
			if in.Arch != arch || len(in.Lists) != 2 || in.RootLinks["/bin"] != "usr/bin" || in.AltLinks["awk"] != "/usr/bin/mawk" ||
				len(in.AltLinks) != 3 || len(in.Alternatives) != 2 || len(in.Certs) != 6 || len(in.StatusSum) != 64 {
				t.Errorf("read %+v", in)
			}
		}},
		{"no dpkg status", rm("var/lib/dpkg/status"), true, nil},
		{"dpkg status is a directory", func(t *testing.T, root string) {
			rm("var/lib/dpkg/status")(t, root)
			os.Mkdir(filepath.Join(root, "var/lib/dpkg/status"), 0o755)
		}, true, nil},
		{"no CA bundle", rm("etc/ssl/certs/ca-certificates.crt"), false, nil},
		{"CA bundle is a directory", func(t *testing.T, root string) {
			rm("etc/ssl/certs/ca-certificates.crt")(t, root)
			os.Mkdir(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"), 0o755)
		}, false, nil},
		{"no certificates dir", rm("etc/ssl"), false, func(t *testing.T, in Inputs) {
			if in.Certs != nil {
				t.Errorf("certs %v", in.Certs)
			}
		}},
		{"certificates dir is a symlink", func(t *testing.T, root string) {
			os.Rename(filepath.Join(root, "etc/ssl/certs"), filepath.Join(root, "etc/ssl/real-certs"))
			mklink(t, "real-certs", filepath.Join(root, "etc/ssl/certs"))
		}, false, nil},
		{"no alternatives", rm("etc/alternatives", "var/lib/dpkg/alternatives"), false, func(t *testing.T, in Inputs) {
			if len(in.AltLinks) != 0 || in.Alternatives != nil {
				t.Errorf("alternatives %v %v", in.AltLinks, in.Alternatives)
			}
		}},
		{"alternatives links dir is a symlink", func(t *testing.T, root string) {
			os.Rename(filepath.Join(root, "etc/alternatives"), filepath.Join(root, "etc/alt-real"))
			mklink(t, "alt-real", filepath.Join(root, "etc/alternatives"))
		}, false, nil},
		{"alternatives database is a symlink", func(t *testing.T, root string) {
			os.Rename(filepath.Join(root, "var/lib/dpkg/alternatives"), filepath.Join(root, "var/lib/dpkg/alt-real"))
			mklink(t, "alt-real", filepath.Join(root, "var/lib/dpkg/alternatives"))
		}, false, nil},
		{"odd file lists", func(t *testing.T, root string) {
			info := filepath.Join(root, "var/lib/dpkg/info")
			mkfile(t, filepath.Join(info, "libc6:amd64.list"), "/.\n/usr/lib/x86_64-linux-gnu/libc.so.6\n")
			mkfile(t, filepath.Join(info, "with space.list"), "/usr/share/a file with spaces\n--recursion\n")
			mkfile(t, filepath.Join(info, "empty.list"), "")
			mkfile(t, filepath.Join(info, "no-newline.list"), "/usr/bin/a\n/usr/bin/b")
			mkfile(t, filepath.Join(info, "blank-line.list"), "/usr/bin/a\n\n/usr/bin/b\n")
			mkfile(t, filepath.Join(info, ".hidden.list"), "/usr/bin/hidden\n")
			os.Mkdir(filepath.Join(info, "dir.list"), 0o755)
			mklink(t, "dash.list", filepath.Join(info, "link.list"))
		}, false, func(t *testing.T, in Inputs) {
			want := map[string][]string{
				"libc6:amd64": {"/.", "/usr/lib/x86_64-linux-gnu/libc.so.6"}, "with space": {"/usr/share/a file with spaces", "--recursion"},
				"no-newline": {"/usr/bin/a", "/usr/bin/b"}, "blank-line": {"/usr/bin/a", "", "/usr/bin/b"}, ".hidden": {"/usr/bin/hidden"},
			}
			for n, l := range want {
				if !reflect.DeepEqual(in.Lists[n], l) {
					t.Errorf("list %q: %q, want %q", n, in.Lists[n], l)
				}
			}
			for _, n := range []string{"empty", "dir", "link"} {
				if _, ok := in.Lists[n]; ok {
					t.Errorf("list %q read", n)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, arch)
			tc.change(t, root)
			want, werr := shellGather(t, root)
			got, err := ReadInputs(root)
			sum, serr := StateDigest(root)
			if serr != nil || sum != shellDigest(t, root) {
				t.Errorf("StateDigest %q %v, state_digest %q", sum, serr, shellDigest(t, root))
			}
			if tc.noDpkg {
				if !errors.Is(werr, ErrNoDpkg) || !errors.Is(err, ErrNoDpkg) || sum != "" {
					t.Fatalf("no dpkg database: script %v, ReadInputs %v, digest %q", werr, err, sum)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ReadInputs differs from the gather script's answer:\n%s", inputsDiff(got, want))
			}
			if got.StatusSum != sum {
				t.Errorf("ReadInputs' digest %s, StateDigest %s", got.StatusSum, sum)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

// TestReadInputsOddNames: what the gather script's answer could not carry is read as it
// is: a package named with ".list:" in its list's name (the host cut the grep line at the
// first ".list:"), and a status file without its last newline (its section's end marker
// would have been glued to the last line). The digest stays state_digest's.
func TestReadInputsOddNames(t *testing.T) {
	arch := shellOracle(t)
	root := fakeRoot(t, arch)
	mkfile(t, filepath.Join(root, "var/lib/dpkg/info/foo.list:amd64.list"), "/usr/bin/foo\n")
	status := "Package: dpkg\nStatus: install ok installed\nArchitecture: " + arch + "\nVersion: 1"
	mkfile(t, filepath.Join(root, "var/lib/dpkg/status"), status)
	in, err := ReadInputs(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := in.Lists["foo.list:amd64"]; !reflect.DeepEqual(got, []string{"/usr/bin/foo"}) {
		t.Errorf("foo.list:amd64's list: %q (lists %v)", got, in.Lists)
	}
	if string(in.Status) != status+"\n" || in.Arch != arch {
		t.Errorf("status %q arch %q", in.Status, in.Arch)
	}
	if sum, _ := StateDigest(root); sum != shellDigest(t, root) || in.StatusSum != sum {
		t.Errorf("digest %s / %s, state_digest %s", sum, in.StatusSum, shellDigest(t, root))
	}
}

// TestReadInputsRefusals: a status that names no installed dpkg (no native architecture)
// or does not parse, and unreadable file lists, are errors, never a partial read.
func TestReadInputsRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, root string)
		want   string
	}{
		{"no dpkg package", func(t *testing.T, root string) {
			mkfile(t, filepath.Join(root, "var/lib/dpkg/status"), "Package: dash\nStatus: install ok installed\nArchitecture: amd64\n\n")
		}, "no installed dpkg package"},
		{"status does not parse", func(t *testing.T, root string) {
			mkfile(t, filepath.Join(root, "var/lib/dpkg/status"), "Status: install ok installed\n\n")
		}, "has no Package field"},
		{"no info dir", func(t *testing.T, root string) { os.RemoveAll(filepath.Join(root, "var/lib/dpkg/info")) }, "file lists"},
		{"alternative too short", func(t *testing.T, root string) {
			mkfile(t, filepath.Join(root, "var/lib/dpkg/alternatives/awk2"), "auto\n")
		}, "alternatives file awk2: too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, "amd64")
			tc.change(t, root)
			if _, err := ReadInputs(root); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
	// control: the unchanged root reads
	if _, err := ReadInputs(fakeRoot(t, "amd64")); err != nil {
		t.Errorf("control: %v", err)
	}
}

// parseGather is how the host read the gather script's answer (the ParseGather the
// image step used before the helper read the guest itself), kept as the reference.
func parseGather(secs guest.Sections) (Inputs, error) {
	for _, name := range []string{"arch", "statussum", "status", "lists", "rootlinks", "altlinks", "certs", "end"} {
		sec, ok := secs[name]
		if !ok {
			return Inputs{}, fmt.Errorf("guest package listing is incomplete (no %s section)", name)
		}
		if sec.RC != 0 {
			return Inputs{}, fmt.Errorf("guest package listing: reading %s exited %d: %s", name, sec.RC, strings.TrimSpace(secs[name+".stderr"].Out))
		}
	}
	in := Inputs{Lists: map[string][]string{}, RootLinks: map[string]string{}, AltLinks: map[string]string{}}
	in.Arch = strings.TrimSpace(secs["arch"].Out)
	in.StatusSum = strings.TrimSpace(secs["statussum"].Out)
	if len(in.StatusSum) != 64 {
		return Inputs{}, fmt.Errorf("guest package listing has no dpkg status digest (got %q)", in.StatusSum)
	}
	in.Status = []byte(secs["status"].Out + "\n")
	for _, l := range nonEmpty(secs["lists"].Out) {
		// grep -H: /var/lib/dpkg/info/NAME.list:PATH
		file, p, ok := strings.Cut(l, ".list:")
		if !ok {
			return Inputs{}, fmt.Errorf("file list line %q has no .list: prefix", l)
		}
		name := file[strings.LastIndex(file, "/")+1:]
		in.Lists[name] = append(in.Lists[name], p)
	}
	for _, l := range nonEmpty(secs["rootlinks"].Out) {
		k, v, ok := strings.Cut(l, "\t")
		if !ok {
			return Inputs{}, fmt.Errorf("root symlink line %q", l)
		}
		in.RootLinks[k] = v
	}
	for _, l := range nonEmpty(secs["altlinks"].Out) {
		k, v, ok := strings.Cut(l, "\t")
		if !ok {
			return Inputs{}, fmt.Errorf("alternatives link line %q", l)
		}
		in.AltLinks[k] = v
	}
	var alts []string
	for name := range secs {
		if n, ok := strings.CutPrefix(name, "alt."); ok && !strings.HasSuffix(n, ".stderr") {
			alts = append(alts, n)
		}
	}
	sort.Strings(alts)
	for _, n := range alts {
		sec := secs["alt."+n]
		if sec.RC != 0 {
			return Inputs{}, fmt.Errorf("guest package listing: reading alternative %s exited %d", n, sec.RC)
		}
		a, err := parseAlternative(n, strings.Split(sec.Out, "\n"))
		if err != nil {
			return Inputs{}, err
		}
		in.Alternatives = append(in.Alternatives, a)
	}
	in.Certs = nonEmpty(secs["certs"].Out)
	return in, nil
}

// nonEmpty are the non-empty lines of s.
func nonEmpty(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
