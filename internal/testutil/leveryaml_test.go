package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// TestLeverYAMLParses: what the builder renders is a lever.yaml config.Parse (strict: an
// unknown key is an error) accepts, with every key it was given read back, for a netns jail
// with workers, ports and lev settings and for a Lima one.
func TestLeverYAMLParses(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LEVER_DEV_NETNS", "1")
	key, agents := filepath.Join(t.TempDir(), "key"), filepath.Join(t.TempDir(), "agents")
	for _, d := range []string{filepath.Join(dir, "tree", "src"), agents} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(key, []byte("sk-x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	y := NetnsYAML("t1", key, "http://127.0.0.1:9", 7443, 7444)
	y.ManagerPorts = []int{7443, 8080}
	y.Workers = []YAMLWorker{{Name: "w1", Dir: "src", LLMAuth: "api-key"}}
	y.Lev = YAMLLev{Agents: agents}
	cfg, err := config.Parse(filepath.Join(dir, "lever.yaml"), []byte(y.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if cfg.Name != "t1" || cfg.Backend != "netns" || cfg.Egress != "closed" || cfg.Broker.JailPort != 7443 || cfg.Broker.AdminPort != 7444 ||
		cfg.Broker.LLMUpstream != "http://127.0.0.1:9/v1" || len(cfg.Workers) != 1 || cfg.Workers[0].Dir != "src" || cfg.Lev.Agents != agents ||
		len(cfg.Manager.AllowPorts) != 2 || cfg.Manager.AllowPorts[1] != 8080 {
		t.Fatalf("read back %+v from\n%s", cfg, y)
	}
	lima := LeverYAML{Name: "v", Backend: "lima", Tree: "tree", Disk: "4GiB", Broker: YAMLBroker{APIKeyFile: "key"},
		Lima: &YAMLLima{Image: "/img/disk.qcow2", Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img", Limactl: "/p/bin/limactl", Accel: "tcg", CPUs: 2, Memory: "2GiB"}}
	want := "name: v\nbackend: lima\ntree: tree\ndisk: 4GiB\nbroker:\n  api_key_file: key\nlima:\n  image: /img/disk.qcow2\n  kernel: /img/vmlinuz\n  initrd: /img/initrd.img\n  limactl: /p/bin/limactl\n  accel: tcg\n  cpus: 2\n  memory: 2GiB\n"
	if got := lima.String(); got != want {
		t.Fatalf("rendered\n%s\nwant\n%s", got, want)
	}
	// Control: the strict parser does refuse a key lever.yaml lacks, so the parse above means something.
	if _, err := config.Parse(filepath.Join(dir, "lever.yaml"), []byte(y.String()+"nosuchkey: 1\n")); err == nil || !strings.Contains(err.Error(), "nosuchkey") {
		t.Fatalf("an unknown key parsed: %v", err)
	}
}
