package bringup

import (
	"testing"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/jail"
)

// TestContainersHonourImageAndBlueprintKeys: manager.image, workers[].image and
// lev.blueprint reach the containers they name, and only those.
func TestContainersHonourImageAndBlueprintKeys(t *testing.T) {
	cfg := &config.Config{Name: "t", Egress: "open",
		Manager: config.Manager{Image: "localhost/mgr:1"},
		Workers: []config.Worker{{Name: "a", Dir: "wa", Image: "localhost/wa:1"}, {Name: "b", Dir: "wb"}},
		Lev:     config.Lev{Blueprint: "agents/cto.toml"},
		Broker:  config.Broker{JailPort: 7443},
	}
	in := &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", aliasV4: "10.0.0.1"}
	cs, err := in.Containers()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]string{}
	for _, c := range cs {
		got[string(c.Role)+":"+c.Env["LEVER_WORKER"]] = [2]string{c.Image, c.Env["LEV_BLUEPRINT"]}
	}
	want := map[string][2]string{
		string(jail.Manager) + ":": {"localhost/mgr:1", "/lever/agents/cto.toml"},
		string(jail.Worker) + ":a": {"localhost/wa:1", ""},
		string(jail.Worker) + ":b": {"localhost/mgr:1", ""}, // defaults to manager.image
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: image, LEV_BLUEPRINT = %q, want %q", k, got[k], w)
		}
	}
}

// TestManagerProtectsWorkerLevHomes: the manager mounts the whole tree, workers' lev homes
// included, so its lev gets them in LEV_PROTECT (its tools then never read or write a
// worker's config, agents or runs); a worker's lev gets none (it sees only its own dir).
func TestManagerProtectsWorkerLevHomes(t *testing.T) {
	cfg := &config.Config{Name: "t", Egress: "open",
		Workers: []config.Worker{{Name: "a", Dir: "wa"}, {Name: "b", Dir: "sub/wb"}},
		Broker:  config.Broker{JailPort: 7443},
	}
	in := &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", aliasV4: "10.0.0.1"}
	cs, err := in.Containers()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		want := ""
		if c.Role == jail.Manager {
			want = "/lever/wa/.lev:/lever/sub/wb/.lev"
		}
		if got := c.Env["LEV_PROTECT"]; got != want {
			t.Errorf("%s %s: LEV_PROTECT = %q, want %q (LEV_HOME %q)", c.Role, c.Env["LEVER_WORKER"], got, want, c.Env["LEV_HOME"])
		}
	}
}
