package jail

import (
	"strings"
	"testing"
)

func TestPlanConfinesEachContainer(t *testing.T) {
	cs, err := Plan(Params{
		Instance: "demo", Image: "localhost/lever/lev:abc", ReadOnly: []string{"ref", "/lever/docs/spec"},
		NestedVirt: true, TicketRoot: "/run/user/1001/lever/tickets",
		Workers: []WorkerSpec{{Name: "a", Dir: "work/a"}, {Name: "b", Dir: "work/b"}},
		Env:     map[string]string{"LEV_PROVIDER_BASE_URL": "https://10.0.0.1:7443/llm/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	mounts := func(c Container) string {
		var s []string
		for _, m := range c.Mounts {
			mode := "rw"
			if m.ReadOnly {
				mode = "ro"
			}
			s = append(s, m.Source+":"+m.Dest+":"+mode)
		}
		return strings.Join(s, " ")
	}
	cases := []struct {
		name, container, mounts string
		devices                 int
	}{
		{"manager: whole tree, read_only mounts, kvm", "lever-demo-manager", "/lever:/lever:rw /run/user/1001/lever/tickets/manager:/run/lever:ro /lever/docs/spec:/lever/docs/spec:ro /lever/ref:/lever/ref:ro", 1},
		{"worker a: own dir, own ticket", "lever-demo-worker-a", "/lever/work/a:/lever/work/a:rw /run/user/1001/lever/tickets/worker-a:/run/lever:ro", 0},
		{"worker b: own dir, own ticket", "lever-demo-worker-b", "/lever/work/b:/lever/work/b:rw /run/user/1001/lever/tickets/worker-b:/run/lever:ro", 0},
	}
	byName := map[string]Container{}
	for _, c := range cs {
		byName[c.Name] = c
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := byName[tc.container]
			if !ok {
				t.Fatalf("no container %s", tc.container)
			}
			if got := mounts(c); got != tc.mounts {
				t.Errorf("mounts %q, want %q", got, tc.mounts)
			}
			if len(c.Devices) != tc.devices {
				t.Errorf("devices %v", c.Devices)
			}
			s := Spec(c)
			if strings.Join(s.CapDrop, ",") != "ALL" || len(s.CapAdd) != 0 {
				t.Errorf("caps: drop %v add %v", s.CapDrop, s.CapAdd)
			}
			if s.NoNewPrivileges == nil || !*s.NoNewPrivileges || s.Privileged == nil || *s.Privileged {
				t.Errorf("no-new-privileges/privileged not set right")
			}
			if s.ResourceLimits.Pids.Limit != DefaultPidsLimit || *s.ResourceLimits.Memory.Limit != DefaultMemoryBytes {
				t.Errorf("limits %+v", s.ResourceLimits)
			}
			if s.NetNS.NSMode != "host" || s.UserNS.NSMode != "keep-id" {
				t.Errorf("netns %s userns %s", s.NetNS.NSMode, s.UserNS.NSMode)
			}
			for k := range c.Env {
				if strings.Contains(strings.ToUpper(k), "KEY") {
					t.Errorf("env has %s", k)
				}
			}
		})
	}
}

func TestPlanRefusesEscapes(t *testing.T) {
	base := func() Params {
		return Params{Instance: "d", Image: "i", TicketRoot: "/run/user/1/lever/tickets"}
	}
	cases := []struct {
		name string
		mod  func(*Params)
		want string
	}{
		{"worker dir escapes the tree", func(p *Params) { p.Workers = []WorkerSpec{{Name: "w", Dir: "../etc"}} }, "workers.w.dir"},
		{"worker dir is the whole tree", func(p *Params) { p.Workers = []WorkerSpec{{Name: "w", Dir: "."}} }, "workers.w.dir"},
		{"worker dir absolute", func(p *Params) { p.Workers = []WorkerSpec{{Name: "w", Dir: "/lever/x"}} }, "workers.w.dir"},
		{"ticket root inside the tree", func(p *Params) {
			p.TicketRoot = "/lever/tickets"
			p.Workers = []WorkerSpec{{Name: "w", Dir: "w"}}
		}, "inside the tree"},
		{"duplicate worker", func(p *Params) { p.Workers = []WorkerSpec{{Name: "w", Dir: "a"}, {Name: "w", Dir: "b"}} }, "appears twice"},
		{"worker name with slash", func(p *Params) { p.Workers = []WorkerSpec{{Name: "../w", Dir: "a"}} }, "bad worker name"},
		{"read_only outside the tree", func(p *Params) { p.ReadOnly = []string{"/etc"} }, "manager.read_only"},
		{"read_only escaping the tree", func(p *Params) { p.ReadOnly = []string{"../etc"} }, "manager.read_only"},
		{"read_only escaping mid-path", func(p *Params) { p.ReadOnly = []string{"a/../../etc"} }, "manager.read_only"},
		{"read_only the whole tree", func(p *Params) { p.ReadOnly = []string{"."} }, "manager.read_only"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mod(&p)
			_, err := Plan(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestHashIgnoresDevicesButNotMounts(t *testing.T) {
	p := Params{Instance: "d", Image: "i"}
	a, _ := Plan(p)
	p.NestedVirt = true
	b, _ := Plan(p)
	if a[0].Hash() != b[0].Hash() {
		t.Errorf("toggling nested_virt changed the hash: /dev/kvm must be create-time only")
	}
	p.ReadOnly = []string{"x"}
	c, _ := Plan(p)
	if a[0].Hash() == c[0].Hash() {
		t.Errorf("adding a read-only mount kept the hash")
	}
}
