package lima

import (
	"net"
	"strings"
	"testing"

	"github.com/lima-vm/lima/pkg/limayaml"
)

func ptr[T any](v T) *T { return &v }

func baseIntent(t *testing.T) (Intent, Realized) {
	t.Helper()
	p, err := ParamsFrom(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	y, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	return IntentOf(p, y), realizedOf(y)
}

// Every way a global default/override can widen the VM is named; the untouched template is clean.
func TestDriftNamesEveryWidening(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(r *Realized)
		want   []string // substrings, one per expected difference
	}{
		{"none", func(r *Realized) {}, nil},
		{"extra mount", func(r *Realized) {
			r.Mounts = append(r.Mounts, limayaml.Mount{Location: "/home/u/.ssh", MountPoint: ptr("/mnt/ssh"), Writable: ptr(false)})
		}, []string{"mounts[1]: /home/u/.ssh at /mnt/ssh (writable=false) is not in the template"}},
		{"mount replaced", func(r *Realized) {
			r.Mounts = []limayaml.Mount{{Location: "/", MountPoint: ptr("/lever"), Writable: ptr(true)}}
		}, []string{"mounts[0]: / at /lever (writable=true) is not in the template", "the tree"}},
		{"tree read-only", func(r *Realized) { r.Mounts[0].Writable = ptr(false) }, []string{"is not writable"}},
		{"sshfs cache on", func(r *Realized) { r.Mounts[0].SSHFS.Cache = ptr(true) }, []string{"sshfs cache is on"}},
		{"sshfs followSymlinks on", func(r *Realized) { r.Mounts[0].SSHFS.FollowSymlinks = ptr(true) }, []string{"sshfs followSymlinks is on"}},
		{"mount type 9p", func(r *Realized) { r.MountType = ptr("9p") }, []string{`mountType: "9p"`}},
		{"plain mode", func(r *Realized) { r.Plain = ptr(true) }, []string{"plain: true"}},
		{"port forward prepended", func(r *Realized) {
			r.PortForwards = append([]limayaml.PortForward{{GuestPort: 8080, HostPort: 8080, GuestIP: net.IPv4(127, 0, 0, 1), HostIP: net.IPv4(0, 0, 0, 0)}}, r.PortForwards...)
		}, []string{`portForwards[0]: {"guestIP":"127.0.0.1","guestPort":8080,"guestPortRange":[0,0],"hostIP":"0.0.0.0","hostPort":8080,"hostPortRange":[0,0]} is not in the template`,
			"portForwards[1]: the template's rule 0 is displaced", "portForwards[2]: the template's rule 1 is displaced"}},
		{"port forward appended", func(r *Realized) {
			r.PortForwards = append(r.PortForwards, limayaml.PortForward{GuestSocket: "/run/podman.sock", HostSocket: "/tmp/p.sock"})
		}, []string{`portForwards[2]: {"guestPortRange":[0,0],"guestSocket":"/run/podman.sock","hostPortRange":[0,0],"hostSocket":"/tmp/p.sock"}`}},
		{"ignore rule removed", func(r *Realized) { r.PortForwards = r.PortForwards[:1] }, []string{"portForwards: 1 rules"}},
		{"containerd user on", func(r *Realized) { r.Containerd.User = ptr(true) }, []string{"containerd.user: true"}},
		{"containerd system on", func(r *Realized) { r.Containerd.System = ptr(true) }, []string{"containerd.system: true"}},
		{"agent forwarding", func(r *Realized) { r.SSH.ForwardAgent = ptr(true) }, []string{"ssh.forwardAgent: true"}},
		{"extra network", func(r *Realized) { r.Networks = []limayaml.Network{{Lima: "shared"}} }, []string{`networks[0]: {"lima":"shared"`}},
		{"copy to host", func(r *Realized) {
			r.CopyToHost = []limayaml.CopyToHost{{GuestFile: "/etc/shadow", HostFile: "/tmp/x"}}
		}, []string{"copyToHost[0]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, r := baseIntent(t)
			c.mutate(&r)
			got := Drift(in, r)
			if len(got) != len(c.want) {
				t.Fatalf("Drift = %q, want %d differences %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("difference %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestDriftErrorNamesVMAndEachDifference(t *testing.T) {
	err := &DriftError{VM: "lever-x", Differences: []string{"mounts[1]: /a at /b (writable=false) is not in the template"}}
	want := "lima VM \"lever-x\": realized config differs from lever's template, refusing to continue (check $LIMA_HOME/_config/default.yaml and override.yaml):\n  - mounts[1]: /a at /b (writable=false) is not in the template"
	if err.Error() != want {
		t.Fatalf("got %q\nwant %q", err.Error(), want)
	}
}

func TestCheckVersion(t *testing.T) {
	cases := []struct {
		out, v, err string
	}{
		{"limactl version 1.2.2\n", "1.2.2", ""},
		{"limactl version 1.2.0", "1.2.0", ""},
		{"limactl version 1.1.1", "1.1.1", "limactl 1.1.1 is not supported: lever accepts Lima 1.2.x"},
		{"limactl version 2.0.0", "2.0.0", "limactl 2.0.0 is not supported: lever accepts Lima 1.2.x"},
		{"limactl version HEAD-abc", "", `limactl --version: cannot read a version from "limactl version HEAD-abc"`},
	}
	for _, c := range cases {
		v, err := CheckVersion(c.out)
		if v != c.v || errString(err) != c.err {
			t.Errorf("CheckVersion(%q) = %q, %v; want %q, %q", c.out, v, err, c.v, c.err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
