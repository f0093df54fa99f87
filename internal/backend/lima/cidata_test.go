package lima

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
)

// The guest image reads Lima's cidata seed with scripts/lima/guest/lever-cidata instead
// of cloud-init. These tests render seeds with Lima's own templates (the files limactl
// executes when it makes the ISO, read from the module lever builds against) and run the
// reader's parse step on them: what Lima asks for is read whole, and anything the reader
// cannot honour is refused before a change.

// The types below carry the fields Lima's cidata templates read, under Lima's names
// (pkg/cidata.TemplateArgs; importing that package would pull its ISO writer's modules
// into lever's build for a test).
type (
	cidataCACerts struct {
		RemoveDefaults *bool
		Trusted        []cidataLines
	}
	cidataLines   struct{ Lines []string }
	cidataNetwork struct {
		MACAddress, Interface string
		Metric                uint32
	}
	cidataMount struct{ Tag, MountPoint, Type, Options string }
	cidataArgs  struct {
		Name, Hostname, IID, User, Comment, Home, Shell, MountType, TimeZone string
		UID                                                                  uint32
		SSHPubKeys, DNSAddresses                                             []string
		Mounts                                                               []cidataMount
		Networks                                                             []cidataNetwork
		SlirpNICName                                                         string
		UpgradePackages, RosettaEnabled, BootScripts                         bool
		CACerts                                                              cidataCACerts
		BootCmds                                                             []cidataLines
		Param, Env                                                           map[string]string
	}
)

var limaTemplates = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/lima-vm/lima").Output()
	if err != nil {
		return "", err
	}
	return filepath.Join(strings.TrimSpace(string(out)), "pkg", "cidata", "cidata.TEMPLATE.d"), nil
})

const cidataReader = "../../../scripts/lima/guest/lever-cidata"

// seedArgs is a seed as lever's template makes one on Linux: qemu, reverse-sshfs (so no
// mounts in user-data), the slirp NIC eth0, the host resolver on 192.168.5.3.
func seedArgs() *cidataArgs {
	return &cidataArgs{
		Name: "lever-p", Hostname: "lima-lever-p", IID: "iid-1764921600",
		User: "lvtl", UID: 1001, Home: "/home/lvtl.linux", Shell: "/bin/bash",
		SSHPubKeys:   []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB lvtl@host"},
		MountType:    "reverse-sshfs",
		Networks:     []cidataNetwork{{MACAddress: "52:55:55:12:34:56", Interface: "eth0", Metric: 100}},
		SlirpNICName: "eth0",
		DNSAddresses: []string{"192.168.5.3"},
		BootScripts:  true,
		Param:        map[string]string{},
	}
}

// writeSeed renders args with Lima's template into a directory, edit applied to the files.
func writeSeed(t *testing.T, args *cidataArgs, edit func(name, body string) string) string {
	t.Helper()
	tdir, err := limaTemplates()
	if err != nil {
		t.Fatalf("finding Lima's module: %v", err)
	}
	dir := t.TempDir()
	for _, name := range []string{"user-data", "meta-data", "network-config", "etc_environment", "boot.sh"} {
		src, err := os.ReadFile(filepath.Join(tdir, name))
		if err != nil {
			t.Fatal(err)
		}
		body := string(src)
		if name != "boot.sh" {
			tm, err := template.New(name).Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := tm.Execute(&b, args); err != nil {
				t.Fatalf("rendering %s with Lima's template: %v", name, err)
			}
			body = b.String()
		}
		if edit != nil {
			body = edit(name, body)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func parseSeed(t *testing.T, dir string) (string, string, error) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command("bash", cidataReader, "parse", dir)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

func TestCidataSeedParsed(t *testing.T) {
	for _, c := range []struct {
		name string
		args func(a *cidataArgs)
		want string
	}{
		{"lever's Linux seed", func(*cidataArgs) {}, `user lvtl
uid 1001
home /home/lvtl.linux
shell /bin/bash
key ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB lvtl@host
bootscript /var/lib/cloud/scripts/per-boot/00-lima.boot.sh
nameserver 192.168.5.3
hostname lima-lever-p
`},
		{"9p mounts, timezone, gecos, two keys", func(a *cidataArgs) {
			a.MountType = "9p"
			a.Mounts = []cidataMount{{Tag: "mount0", MountPoint: "/lever", Type: "9p", Options: "rw,trans=virtio,version=9p2000.L,msize=131072,cache=fscache,nofail"}}
			a.TimeZone = "Europe/Berlin"
			a.Comment = "Lever Test's user"
			a.SSHPubKeys = append(a.SSHPubKeys, "ecdsa-sha2-nistp256 AAAAE2VjZHNh second")
			a.DNSAddresses = nil
		}, `mount mount0 /lever 9p rw,trans=virtio,version=9p2000.L,msize=131072,cache=fscache,nofail
timezone Europe/Berlin
user lvtl
uid 1001
gecos Lever Test's user
home /home/lvtl.linux
shell /bin/bash
key ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB lvtl@host
key ecdsa-sha2-nistp256 AAAAE2VjZHNh second
bootscript /var/lib/cloud/scripts/per-boot/00-lima.boot.sh
hostname lima-lever-p
`},
		// Lima's env block for /etc/environment (its template sorts the keys)
		{"environment values", func(a *cidataArgs) {
			a.Env = map[string]string{"LANG": "C.UTF-8", "FOO": "a b"}
		}, `user lvtl
uid 1001
home /home/lvtl.linux
shell /bin/bash
key ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB lvtl@host
bootscript /var/lib/cloud/scripts/per-boot/00-lima.boot.sh
nameserver 192.168.5.3
hostname lima-lever-p
env FOO=a b
env LANG=C.UTF-8
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := seedArgs()
			c.args(a)
			out, stderr, err := parseSeed(t, writeSeed(t, a, nil))
			if err != nil {
				t.Fatalf("parse refused Lima's own seed: %v\n%s", err, stderr)
			}
			if out != c.want {
				t.Errorf("parsed seed:\n%s\nwant:\n%s", out, c.want)
			}
		})
	}
}

func TestCidataSeedRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		args func(a *cidataArgs)
		edit func(name, body string) string
		want string
	}{
		{"bootcmd (Lima's provision mode boot)", func(a *cidataArgs) {
			a.BootCmds = []cidataLines{{Lines: []string{"touch /pwned"}}}
		}, nil, "key bootcmd is not supported"},
		{"trusted CA certificates", func(a *cidataArgs) {
			f := false
			a.CACerts = cidataCACerts{RemoveDefaults: &f, Trusted: []cidataLines{{Lines: []string{"-----BEGIN CERTIFICATE-----"}}}}
		}, nil, "key ca_certs is not supported"},
		{"package upgrades", func(a *cidataArgs) { a.UpgradePackages = true }, nil, "key package_update is not supported"},
		{"a user name that is a shell command", func(a *cidataArgs) { a.User = "x;reboot" }, nil, `user name "x;reboot"`},
		{"home outside by ..", func(a *cidataArgs) { a.Home = "/home/../etc" }, nil, `homedir "/home/../etc"`},
		{"a key smuggling a second line", func(a *cidataArgs) {
			a.SSHPubKeys = []string{"ssh-ed25519 AAAA a\nssh-ed25519 BBBB intruder"}
		}, nil, "quoting this reader does not accept"},
		{"a key that is not a key", func(a *cidataArgs) {
			a.SSHPubKeys = []string{`command="sh" ssh-ed25519 AAAA`}
		}, nil, "quoting this reader does not accept"},
		{"an option-prefixed key", func(a *cidataArgs) {
			a.SSHPubKeys = []string{"from=*,no-pty ssh-ed25519 AAAA"}
		}, nil, "ssh key"},
		{"a second NIC", func(a *cidataArgs) {
			a.Networks = append(a.Networks, cidataNetwork{MACAddress: "52:55:55:00:00:01", Interface: "lima0", Metric: 200})
		}, nil, "interface lima0"},
		{"a bad hostname", func(a *cidataArgs) { a.Hostname = "lima-$(reboot)" }, nil, "meta-data line 2: bad hostname"},
		{"a mount point with ..", func(a *cidataArgs) {
			a.MountType = "9p"
			a.Mounts = []cidataMount{{Tag: "mount0", MountPoint: "/lever/../etc", Type: "9p", Options: "rw"}}
		}, nil, "bad mount point"},
		{"a second user", nil, func(name, body string) string {
			if name != "user-data" {
				return body
			}
			return strings.Replace(body, "users:\n", "users:\n  - name: \"root2\"\n    uid: \"0\"\n", 1)
		}, "a second user"},
		{"runcmd appended", nil, func(name, body string) string {
			if name != "user-data" {
				return body
			}
			return body + "runcmd:\n  - [touch, /pwned]\n"
		}, "key runcmd is not supported"},
		{"another file written", nil, func(name, body string) string {
			if name != "user-data" {
				return body
			}
			return strings.Replace(body, "/var/lib/cloud/scripts/per-boot/00-lima.boot.sh", "/etc/profile.d/x.sh", 1)
		}, "file other than Lima's boot hook"},
		{"no ssh key", nil, func(name, body string) string {
			if name != "user-data" {
				return body
			}
			i := strings.Index(body, "    ssh-authorized-keys:")
			j := strings.Index(body, "write_files:")
			return body[:i] + body[j:]
		}, "has no ssh key"},
		{"not cloud-config", nil, func(name, body string) string {
			if name != "user-data" {
				return body
			}
			return strings.Replace(body, "#cloud-config", "#!/bin/sh", 1)
		}, "not a #cloud-config"},
		{"an environment value with a command substitution", func(a *cidataArgs) {
			a.Env = map[string]string{"PS1": "$(reboot)"}
		}, nil, "etc_environment line 2: not a KEY=VALUE line"},
		{"an environment value smuggling a second line", func(a *cidataArgs) {
			a.Env = map[string]string{"A": "1\nnot an assignment"}
		}, nil, "etc_environment line 3: not a KEY=VALUE line"},
		{"a line after Lima's environment block", nil, func(name, body string) string {
			if name != "etc_environment" {
				return body
			}
			return body + "\nLD_PRELOAD=/tmp/x.so\n"
		}, "a line after #LIMA-END"},
		{"not Lima's environment block", nil, func(name, body string) string {
			if name != "etc_environment" {
				return body
			}
			return "LD_PRELOAD=/tmp/x.so\n"
		}, "not Lima's block"},
		{"no meta-data hostname", nil, func(name, body string) string {
			if name != "meta-data" {
				return body
			}
			return "instance-id: x\n"
		}, "no local-hostname"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := seedArgs()
			if c.args != nil {
				c.args(a)
			}
			out, stderr, err := parseSeed(t, writeSeed(t, a, c.edit))
			if err == nil {
				t.Fatalf("parse accepted the seed:\n%s", out)
			}
			if !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "refusing the seed") {
				t.Errorf("stderr = %q, want it to refuse naming %q", stderr, c.want)
			}
		})
	}

	t.Run("a seed without network-config", func(t *testing.T) {
		dir := writeSeed(t, seedArgs(), nil)
		os.Remove(filepath.Join(dir, "network-config"))
		if _, stderr, err := parseSeed(t, dir); err == nil || !strings.Contains(stderr, "has no network-config") {
			t.Errorf("err %v, stderr %q: want a refusal naming network-config", err, stderr)
		}
	})
	t.Run("a seed without etc_environment", func(t *testing.T) {
		dir := writeSeed(t, seedArgs(), nil)
		os.Remove(filepath.Join(dir, "etc_environment"))
		if _, stderr, err := parseSeed(t, dir); err == nil || !strings.Contains(stderr, "has no etc_environment") {
			t.Errorf("err %v, stderr %q: want a refusal naming etc_environment", err, stderr)
		}
	})
}
