package containers

import (
	"sort"
	"strings"
	"testing"
)

func planParams() Params {
	return Params{
		Instance: "demo", Image: "localhost/lever/lev:abc", BenchImage: "localhost/lever/bench:def",
		ReadOnly: []string{"ref", "/lever/docs/spec"}, NestedVirt: true,
		TicketRoot: "/run/user/1001/lever/agents", BenchRoot: "/run/user/1001/lever/bench",
		LevHomeRoot: "/var/lib/lever/demo/lev",
		Workers:     []WorkerSpec{{Name: "a", Dir: "work/a"}, {Name: "b", Dir: "work/b"}},
		Command:     []string{"serve", "--token-file", "/run/lever/token"},
		Env:         map[string]string{"LEV_PROVIDER_BASE_URL": "https://10.0.0.1:7443/llm/"},
	}
}

func mountList(c Container) string {
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

// TestPlanConfinesEachContainer: two containers per agent, each with exactly its mounts,
// env, entrypoint and working directory; the hardening is the same for both kinds.
func TestPlanConfinesEachContainer(t *testing.T) {
	cs, err := Plan(planParams())
	if err != nil {
		t.Fatal(err)
	}
	const (
		ag   = "/run/user/1001/lever/agents/"
		bn   = "/run/user/1001/lever/bench/"
		home = "/var/lib/lever/demo/lev/"
		mgrT = "/lever:/lever:rw /lever/docs:/lever/docs:rw /lever/docs/spec:/lever/docs/spec:ro /lever/ref:/lever/ref:ro" // docs: spec's parent, bound onto itself
	)
	levEnv := "LEVER_ROLE LEV_AGENTS_DIR LEV_BENCH_SOCKET LEV_CONFIG LEV_HOME LEV_LISTEN LEV_PROVIDER_BASE_URL LEV_TOKEN_FILE"
	cases := []struct {
		name, container, role, image, mounts, workdir, entry, cmd, env string
		devices                                                        int
	}{
		{"manager lev: tree, read_only, its enrolment dir ro, its lev home and bench dir", "lever-demo-manager", "manager", "localhost/lever/lev:abc",
			mgrT + " " + ag + "manager:/run/lever:ro " + home + "manager:/var/lib/lev:rw " + bn + "manager:/run/lever-bench:rw",
			"/lever", "", "serve --token-file /run/lever/token", levEnv, 0},
		{"manager bench: the same tree mounts, the bench dir, nothing of lev's; kvm for its tools", "lever-demo-manager-bench", "bench", "localhost/lever/bench:def",
			mgrT + " " + bn + "manager:/run/lever-bench:rw",
			"/lever", "/lev", "bench serve --socket /run/lever-bench/exec.sock", "GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0 HOME LEVER_ROLE PATH", 1},
		{"worker a lev: own dir, own enrolment dir, own home", "lever-demo-worker-a", "worker", "localhost/lever/lev:abc",
			"/lever/work/a:/lever/work/a:rw " + ag + "worker-a:/run/lever:ro " + home + "worker-a:/var/lib/lev:rw " + bn + "worker-a:/run/lever-bench:rw",
			"/lever/work/a", "", "serve --token-file /run/lever/token", strings.Replace(levEnv, "LEVER_ROLE", "LEVER_ROLE LEVER_WORKER", 1), 0},
		{"worker a bench: only its dir", "lever-demo-worker-a-bench", "bench", "localhost/lever/bench:def",
			"/lever/work/a:/lever/work/a:rw " + bn + "worker-a:/run/lever-bench:rw",
			"/lever/work/a", "/lev", "bench serve --socket /run/lever-bench/exec.sock", "GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0 HOME LEVER_ROLE LEVER_WORKER PATH", 0},
		{"worker b bench: only its dir", "lever-demo-worker-b-bench", "bench", "localhost/lever/bench:def",
			"/lever/work/b:/lever/work/b:rw " + bn + "worker-b:/run/lever-bench:rw",
			"/lever/work/b", "/lev", "bench serve --socket /run/lever-bench/exec.sock", "GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0 HOME LEVER_ROLE LEVER_WORKER PATH", 0},
	}
	if len(cs) != 6 {
		t.Fatalf("%d containers, want 6 (a lev container and a bench for each of 3 agents)", len(cs))
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
			if string(c.Role) != tc.role || c.Labels[LabelRole] != tc.role || c.Image != tc.image {
				t.Errorf("role %s label %s image %s", c.Role, c.Labels[LabelRole], c.Image)
			}
			if got := mountList(c); got != tc.mounts {
				t.Errorf("mounts\n got %q\nwant %q", got, tc.mounts)
			}
			var keys []string
			for k := range c.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if got := strings.Join(keys, " "); got != tc.env {
				t.Errorf("env keys %q, want %q", got, tc.env)
			}
			if len(c.Devices) != tc.devices {
				t.Errorf("devices %v", c.Devices)
			}
			s := Spec(c)
			if s.WorkDir != tc.workdir || strings.Join(s.Entrypoint, " ") != tc.entry || strings.Join(s.Command, " ") != tc.cmd {
				t.Errorf("workdir %q entrypoint %q command %q", s.WorkDir, s.Entrypoint, s.Command)
			}
			if strings.Join(s.CapDrop, ",") != "ALL" || len(s.CapAdd) != 0 {
				t.Errorf("caps: drop %v add %v", s.CapDrop, s.CapAdd)
			}
			if s.NoNewPrivileges == nil || !*s.NoNewPrivileges || s.Privileged == nil || *s.Privileged {
				t.Errorf("no-new-privileges/privileged not set right")
			}
			if s.ReadOnlyFilesystem == nil || !*s.ReadOnlyFilesystem {
				t.Errorf("root not read-only")
			}
			if s.ResourceLimits.Pids.Limit != DefaultPidsLimit || *s.ResourceLimits.Memory.Limit != DefaultMemoryBytes {
				t.Errorf("limits %+v", s.ResourceLimits)
			}
			if s.NetNS.NSMode != "host" || s.UserNS.NSMode != "keep-id" {
				t.Errorf("netns %s userns %s", s.NetNS.NSMode, s.UserNS.NSMode)
			}
			for k := range c.Env {
				if _, git := BenchGitEnv[k]; git {
					continue // a git config key's name (safe.directory), not a secret
				}
				if strings.Contains(strings.ToUpper(k), "KEY") {
					t.Errorf("env has %s", k)
				}
			}
		})
	}
	// The bench sees nothing of lev's: no enrolment dir, no lev home, no TLS or token
	// path, in its mounts or its environment, whatever the agent.
	for _, c := range cs {
		if c.Role != Bench {
			continue
		}
		for _, m := range c.Mounts {
			if m.Dest == TicketMount || m.Dest == LevHomeMount || strings.HasPrefix(m.Source, "/run/user/1001/lever/agents") || strings.HasPrefix(m.Source, "/var/lib/lever") {
				t.Errorf("%s mounts %s at %s", c.Name, m.Source, m.Dest)
			}
		}
		for k, v := range c.Env {
			if strings.HasPrefix(k, "LEV_") || strings.Contains(v, TicketMount) || strings.Contains(v, LevHomeMount) {
				t.Errorf("%s env %s=%s", c.Name, k, v)
			}
		}
	}
}

// TestPlanLevEnv: lev finds everything from what lever mounts; LEV_POLICY only when a
// policy was pushed; no TCP listener (the bench shares the guest's network namespace).
func TestPlanLevEnv(t *testing.T) {
	for _, policy := range []bool{false, true} {
		p := planParams()
		p.Policy = policy
		cs, err := Plan(p)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"LEV_HOME": "/var/lib/lev", "LEV_CONFIG": "/run/lever/config.toml", "LEV_AGENTS_DIR": "/run/lever/agents",
			"LEV_TOKEN_FILE": "/run/lever/token", "LEV_LISTEN": "unix:/var/lib/lev/api.sock",
			"LEV_BENCH_SOCKET": "/run/lever-bench/exec.sock",
		}
		if policy {
			want["LEV_POLICY"] = "/run/lever/policy.toml"
		}
		for _, c := range cs {
			if c.Role == Bench {
				continue
			}
			for k, v := range want {
				if c.Env[k] != v {
					t.Errorf("policy=%v %s: %s=%q, want %q", policy, c.Name, k, c.Env[k], v)
				}
			}
			if _, has := c.Env["LEV_POLICY"]; has != policy {
				t.Errorf("policy=%v %s: LEV_POLICY present=%v", policy, c.Name, has)
			}
			if _, has := c.Env["LEV_PROTECT"]; has {
				t.Errorf("%s: LEV_PROTECT set, but lev homes are outside the tree now", c.Name)
			}
		}
	}
}

func TestPlanRefusesEscapes(t *testing.T) {
	base := func() Params {
		return Params{Instance: "d", Image: "i", BenchImage: "b", TicketRoot: "/run/user/1/lever/tickets",
			LevHomeRoot: "/var/lib/lever/d/lev", BenchRoot: "/run/user/1/lever/bench"}
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
		{"lev home root inside the tree (guest spelling)", func(p *Params) { p.LevHomeRoot = "/lever/.lev" }, "lev home root /lever/.lev is inside the tree"},
		{"lev home root inside the tree (host spelling)", func(p *Params) {
			p.TreeSource = "/home/u/proj"
			p.LevHomeRoot = "/home/u/proj/x/../.lev"
		}, "lev home root"},
		{"bench root inside the tree", func(p *Params) { p.BenchRoot = "/lever/bench" }, "bench root /lever/bench is inside the tree"},
		{"lev home root relative", func(p *Params) { p.LevHomeRoot = "lev" }, "absolute guest path"},
		{"no lev home root", func(p *Params) { p.LevHomeRoot = "" }, "lev home root is required"},
		{"no bench image", func(p *Params) { p.BenchImage = "" }, "bench image are required"},
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
	base := func() Params {
		return Params{Instance: "d", Image: "i", BenchImage: "b", TicketRoot: "/t", LevHomeRoot: "/h", BenchRoot: "/b"}
	}
	plan := func(mod func(*Params)) []Container {
		p := base()
		mod(&p)
		cs, err := Plan(p)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	a := plan(func(*Params) {})
	// index 0 is the manager's lev container, 1 its bench
	cases := []struct {
		name       string
		mod        func(*Params)
		levChanges bool
		benchChg   bool
	}{
		{"nested_virt is create-time only", func(p *Params) { p.NestedVirt = true }, false, false},
		{"a read-only mount: both containers see the tree", func(p *Params) { p.ReadOnly = []string{"x"} }, true, true},
		{"the bench image", func(p *Params) { p.BenchImage = "b2" }, false, true},
		{"the lev image", func(p *Params) { p.Image = "i2" }, true, false},
		{"the lev home root", func(p *Params) { p.LevHomeRoot = "/h2" }, true, false},
		{"the bench root", func(p *Params) { p.BenchRoot = "/b2" }, true, true},
		{"a pushed policy", func(p *Params) { p.Policy = true }, true, false},
		{"lev's env", func(p *Params) { p.Env = map[string]string{"LEVER_SETTINGS": "x"} }, true, false},
	}
	for _, tc := range cases {
		b := plan(tc.mod)
		if got := a[0].Hash() != b[0].Hash(); got != tc.levChanges {
			t.Errorf("%s: lev container hash changed=%v, want %v", tc.name, got, tc.levChanges)
		}
		if got := a[1].Hash() != b[1].Hash(); got != tc.benchChg {
			t.Errorf("%s: bench hash changed=%v, want %v", tc.name, got, tc.benchChg)
		}
		if b[0].Labels[LabelSpecHash] != b[0].Hash() || b[1].Labels[LabelSpecHash] != b[1].Hash() {
			t.Errorf("%s: spec label not the hash", tc.name)
		}
	}
}

// TestPlanTreeContainmentSiblings drives the plan's tree checks (fspath.Within) with paths
// that only share the tree's prefix: a sibling is outside, so a lev home beside the tree
// is accepted and a read-only path beside it is refused; the same path one separator
// further in is the attack the check exists for.
func TestPlanTreeContainmentSiblings(t *testing.T) {
	base := func() Params {
		return Params{Instance: "d", Image: "i", BenchImage: "b", TicketRoot: "/run/user/1/lever/tickets",
			LevHomeRoot: "/var/lib/lever/d/lev", BenchRoot: "/run/user/1/lever/bench", TreeSource: "/home/u/proj"}
	}
	cases := []struct {
		name string
		mod  func(*Params)
		want string // "" = accepted
	}{
		{"lev home root inside the tree (guest path)", func(p *Params) { p.LevHomeRoot = "/lever/.lev" }, "inside the tree"},
		{"lev home root beside the tree (guest path, shared prefix)", func(p *Params) { p.LevHomeRoot = "/lever2/.lev" }, ""},
		{"lev home root inside the tree (host path)", func(p *Params) { p.LevHomeRoot = "/home/u/proj/.lev" }, "inside the tree"},
		{"lev home root beside the tree (host path, shared prefix)", func(p *Params) { p.LevHomeRoot = "/home/u/proj2/.lev" }, ""},
		{"lev home root is the tree itself", func(p *Params) { p.LevHomeRoot = "/home/u/proj/" }, "inside the tree"},
		{"read_only absolute inside the tree", func(p *Params) { p.ReadOnly = []string{"/lever/docs"} }, ""},
		{"read_only absolute beside the tree (shared prefix)", func(p *Params) { p.ReadOnly = []string{"/lever2/docs"} }, "manager.read_only"},
		{"worker dir inside the tree", func(p *Params) { p.Workers = []WorkerSpec{{Name: "w", Dir: "sub"}} }, ""},
		{"worker dir climbing to a sibling", func(p *Params) { p.Workers = []WorkerSpec{{Name: "w", Dir: "../lever2"}} }, "workers.w.dir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mod(&p)
			_, err := Plan(p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
		})
	}
}

// TestPlanBenchTree: a workbench given as a tree (an absolute path) runs it as an
// overlaid root file system, with the image config's environment set in the container;
// an image ref stays an image. The lev containers are images either way.
func TestPlanBenchTree(t *testing.T) {
	for _, tc := range []struct {
		bench             string
		wantImg, wantRoot string
	}{
		{"/var/lib/lever/demo/workbench/0123456789ab", "", "/var/lib/lever/demo/workbench/0123456789ab"},
		{"localhost/lever/workbench:0123456789ab", "localhost/lever/workbench:0123456789ab", ""}, // control
	} {
		p := planParams()
		p.BenchImage = tc.bench
		cs, err := Plan(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Role != Bench {
				if c.Image != p.Image || c.Rootfs != "" {
					t.Errorf("%s: image %q rootfs %q", c.Name, c.Image, c.Rootfs)
				}
				continue
			}
			if c.Image != tc.wantImg || c.Rootfs != tc.wantRoot {
				t.Errorf("%s: image %q rootfs %q, want %q %q", c.Name, c.Image, c.Rootfs, tc.wantImg, tc.wantRoot)
			}
			s := Spec(c)
			if tc.wantRoot != "" {
				if s.Rootfs != tc.wantRoot || s.RootfsOverlay == nil || !*s.RootfsOverlay || s.Image != "" || c.Env["SSL_CERT_DIR"] != "/etc/ssl/certs" {
					t.Errorf("%s: spec rootfs %q overlay %v image %q env %v", c.Name, s.Rootfs, s.RootfsOverlay, s.Image, c.Env)
				}
				// the hardening is the image's: read-only root, no capabilities, keep-id
				if !*s.ReadOnlyFilesystem || s.CapDrop[0] != "ALL" || !*s.NoNewPrivileges || s.UserNS.NSMode != "keep-id" {
					t.Errorf("%s: hardening lost on a tree root", c.Name)
				}
			} else if s.Rootfs != "" || s.Image != tc.wantImg {
				t.Errorf("%s: spec rootfs %q image %q", c.Name, s.Rootfs, s.Image)
			}
		}
	}
}

// TestPlanLevTree: lev's tree (an absolute path as the lev image) runs the lev containers
// as an overlaid root with the lev image's entrypoint and environment; an image of the
// user's choosing (UseImage) takes all of that back, so its own entrypoint and PATH rule.
func TestPlanLevTree(t *testing.T) {
	p := planParams()
	p.Image = "/var/lib/lever/demo/trees/lev-0123456789ab-00000000"
	cs, err := Plan(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Role == Bench {
			if c.Rootfs != "" || c.Image != p.BenchImage {
				t.Errorf("%s: the bench runs %q/%q", c.Name, c.Image, c.Rootfs)
			}
			continue
		}
		s := Spec(c)
		if c.Rootfs != p.Image || s.Rootfs != p.Image || s.Image != "" || strings.Join(c.Entrypoint, " ") != "/lev" || c.Env["PATH"] != "/" || c.Env["HOME"] != "/tmp" {
			t.Errorf("%s: rootfs %q image %q entrypoint %v env %v", c.Name, s.Rootfs, s.Image, c.Entrypoint, c.Env)
		}
		if c.Env["LEV_TOKEN_FILE"] == "" {
			t.Errorf("%s lost lev's own environment", c.Name)
		}
		c.UseImage("localhost/project/lev:1")
		if c.Rootfs != "" || c.Image != "localhost/project/lev:1" || c.Entrypoint != nil || c.Env["PATH"] != "" || c.Env["LEV_TOKEN_FILE"] == "" {
			t.Errorf("%s after UseImage: image %q rootfs %q entrypoint %v env %v", c.Name, c.Image, c.Rootfs, c.Entrypoint, c.Env)
		}
	}
}

// What lever protects (lever.yaml in the tree, the repositories' .git) is read-only in
// every container that sees it: the manager and its bench see all of it, a worker and its
// bench what lies in the worker's dir. Every directory between a container's tree root and
// a protected path is bound onto itself, so the manager cannot rename work/a away with
// its read-only .git inside and make a new one. A path also in manager.read_only, in
// either spelling, is one mount.
func TestPlanProtected(t *testing.T) {
	p := planParams()
	p.ReadOnly = []string{"lever.yaml", "ref", "/lever/.git"}
	p.Protected = []string{"lever.yaml", ".git", "work/a/.git"}
	cs, err := Plan(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lever-demo-manager":        "/lever:/lever:rw /lever/.git:/lever/.git:ro /lever/lever.yaml:/lever/lever.yaml:ro /lever/ref:/lever/ref:ro /lever/work:/lever/work:rw /lever/work/a:/lever/work/a:rw /lever/work/a/.git:/lever/work/a/.git:ro",
		"lever-demo-manager-bench":  "/lever:/lever:rw /lever/.git:/lever/.git:ro /lever/lever.yaml:/lever/lever.yaml:ro /lever/ref:/lever/ref:ro /lever/work:/lever/work:rw /lever/work/a:/lever/work/a:rw /lever/work/a/.git:/lever/work/a/.git:ro",
		"lever-demo-worker-a":       "/lever/work/a:/lever/work/a:rw /lever/work/a/.git:/lever/work/a/.git:ro",
		"lever-demo-worker-a-bench": "/lever/work/a:/lever/work/a:rw /lever/work/a/.git:/lever/work/a/.git:ro",
		"lever-demo-worker-b":       "/lever/work/b:/lever/work/b:rw",
		"lever-demo-worker-b-bench": "/lever/work/b:/lever/work/b:rw",
	}
	for _, c := range cs {
		var tree []string
		for _, m := range strings.Fields(mountList(c)) {
			if strings.HasPrefix(m, "/lever") {
				tree = append(tree, m)
			}
		}
		if got := strings.Join(tree, " "); got != want[c.Name] {
			t.Errorf("%s: tree mounts\n got %s\nwant %s", c.Name, got, want[c.Name])
		}
	}
	for _, bad := range []string{"../x", "/etc", "", ".", "/lever"} {
		p := planParams()
		p.Protected = []string{bad}
		if _, err := Plan(p); err == nil || !strings.Contains(err.Error(), "protected path") {
			t.Errorf("protected path %q: err %v", bad, err)
		}
	}
}
