//go:build e2e

package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/testutil"
)

// TestEgressForeignRedirectE2E: rules in tables lever does not own that rewrite a packet
// after LEVER_EGRESS accepted it (a payload rewrite on output after the filter, on
// postrouting, or in a netdev egress chain) send the jail's traffic to a port the chain
// drops. Each attack row first proves the escape with real traffic (the guest reaches a
// host-side listener on the alias's dropped port 7444 by connecting to the allowed 7443,
// while a direct connection to 7444 fails), then shows `lever egress verify` exit 1 and
// `lever egress apply` fail naming the rule, and verify clean once the table is gone.
// The control rows are DNATs in nat chains (output at priority -100 and at 100, which
// the kernel runs before the filter anyway): the same redirect, judged by the filter and
// dropped, and not reported.
func TestEgressForeignRedirectE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft")
	dir := t.TempDir()
	name := fmt.Sprintf("f%d", os.Getpid()%1000000)
	os.Mkdir(filepath.Join(dir, "tree"), 0o755)
	os.WriteFile(filepath.Join(dir, "key"), []byte("sk-test\n"), 0o600)
	cfg := filepath.Join(dir, "lever.yaml")
	testutil.LeverYAML{Name: name, Backend: "netns", Tree: "tree", Egress: "closed", ManagerPorts: []int{7443},
		Broker: testutil.YAMLBroker{LLMAuth: "api-key", APIKeyFile: "key"}}.Write(t, cfg)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv(netns.PrefixEnv, "lvt-f")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(t.TempDir(), "state"))
	b, err := netns.New(netns.Options{Name: name, Prefix: "lvt-f"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Destroy(context.Background()) })
	lever := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		return code, out.String() + errb.String()
	}
	in := func(argv ...string) (string, error) {
		o, err := exec.Command("ip", append([]string{"netns", "exec", b.Namespace()}, argv...)...).CombinedOutput()
		return string(o), err
	}
	if code, o := lever("egress", "apply", "-c", cfg); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, o)
	}
	alias, _ := b.HostAddrs()
	ln, err := net.Listen("tcp", net.JoinHostPort(alias.String(), "7444"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	connect := func(port int) bool {
		_, err := in("timeout", "2", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", alias, port))
		return err == nil
	}
	if connect(7444) {
		t.Fatal("control: the guest reaches the alias's port 7444 with no tampering; LEVER_EGRESS should drop it")
	}
	dev := strings.TrimSpace(func() string {
		o, _ := in("sh", "-c", "ls /sys/class/net | grep -v '^lo$' | head -1")
		return o
	}())
	a := alias.String()
	// Replies from 7444 are rewritten back to 7443 on the way in, so the guest's socket
	// completes the handshake: the escape is a working connection, not a stray SYN.
	back := "add chain ip lvx in { type filter hook prerouting priority 0; }\nadd rule ip lvx in ip saddr " + a + " tcp sport 7444 tcp sport set 7443\n"
	rows := []struct {
		name   string
		script string
		escape bool // the rows that route around LEVER_EGRESS
		want   string
	}{
		{"output-after-filter", "add table ip lvx\nadd chain ip lvx o { type filter hook output priority 100; }\nadd rule ip lvx o ip daddr " + a + " tcp dport 7443 tcp dport set 7444\n" + back, true, "table ip lvx chain o: `ip daddr " + a + " tcp dport 7443 tcp dport set 7444`"},
		{"postrouting", "add table ip lvx\nadd chain ip lvx p { type filter hook postrouting priority 0; }\nadd rule ip lvx p ip daddr " + a + " tcp dport 7443 tcp dport set 7444\n" + back, true, "table ip lvx chain p: `ip daddr " + a + " tcp dport 7443 tcp dport set 7444`"},
		{"inet-postrouting-jump", "add table inet lvx\nadd chain inet lvx r\nadd chain inet lvx p { type filter hook postrouting priority 300; }\nadd rule inet lvx p jump r\nadd rule inet lvx r ip daddr " + a + " tcp dport 7443 tcp dport set 7444\nadd table ip lvx\n" + back, true, "table inet lvx chain r: `ip daddr " + a + " tcp dport 7443 tcp dport set 7444`"},
		{"netdev-egress", "add table netdev lvx\nadd chain netdev lvx e { type filter hook egress device " + dev + " priority 0; }\nadd rule netdev lvx e ip daddr " + a + " tcp dport 7443 tcp dport set 7444\nadd table ip lvx\n" + back, true, "table netdev lvx chain e: `ip daddr " + a + " tcp dport 7443 tcp dport set 7444`"},
		{"control-nat-output-100", "add table ip lvx\nadd chain ip lvx o { type nat hook output priority -100; }\nadd rule ip lvx o ip daddr " + a + " tcp dport 7443 dnat to " + a + ":7444\n", false, ""},
		{"control-nat-output+100", "add table ip lvx\nadd chain ip lvx o { type nat hook output priority 100; }\nadd rule ip lvx o ip daddr " + a + " tcp dport 7443 dnat to " + a + ":7444\n", false, ""},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			cmd := exec.Command("ip", "netns", "exec", b.Namespace(), "nft", "-f", "-")
			cmd.Stdin = strings.NewReader(r.script)
			if o, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("tamper: %v %s", err, o)
			}
			clean := func() {
				in("nft", "delete", "table", "ip", "lvx")
				in("nft", "delete", "table", "inet", "lvx")
				in("nft", "delete", "table", "netdev", "lvx")
			}
			defer clean()
			if got := connect(7443); got != r.escape {
				t.Fatalf("control: connecting to %s:7443 reached the listener on 7444: %v, want %v", a, got, r.escape)
			}
			code, out := lever("egress", "verify", "-c", cfg)
			if !r.escape {
				if code != 0 {
					t.Fatalf("verify flags a DNAT the filter judges: exit %d %s", code, out)
				}
				return
			}
			if code != 1 || !strings.Contains(out, "routes around LEVER_EGRESS") || !strings.Contains(out, r.want) {
				t.Errorf("verify: exit %d, want 1 naming %q:\n%s", code, r.want, out)
			}
			code, out = lever("egress", "apply", "-c", cfg)
			if code == 0 || !strings.Contains(out, r.want) || !strings.Contains(out, "remove them and re-run") {
				t.Errorf("apply: exit %d, want a failure naming %q:\n%s", code, r.want, out)
			}
			clean()
			if code, out := lever("egress", "verify", "-c", cfg); code != 0 {
				t.Errorf("verify once the table is gone: exit %d %s", code, out)
			}
			if connect(7443) {
				t.Error("the escape still works once the table is gone")
			}
		})
	}
}
