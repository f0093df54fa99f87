//go:build e2e

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/testutil"
)

// TestEgressCommandsE2E drives `lever egress plan|apply|verify` on the netns substrate:
// verify's exit codes (2 error, 0 match, 1 drift), apply's unchanged/rebuilt report, and
// the plan's commit order.
func TestEgressCommandsE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables")
	dir := t.TempDir()
	name := fmt.Sprintf("c%d", os.Getpid()%1000000)
	os.Mkdir(filepath.Join(dir, "tree"), 0o755)
	os.WriteFile(filepath.Join(dir, "key"), []byte("sk-test\n"), 0o600)
	cfg := filepath.Join(dir, "lever.yaml")
	testutil.LeverYAML{Name: name, Backend: "netns", Tree: "tree", Egress: "open", ManagerPorts: []int{7443},
		Broker: testutil.YAMLBroker{LLMAuth: "api-key", APIKeyFile: "key"}}.Write(t, cfg)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv(netns.PrefixEnv, "lvt-e")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(t.TempDir(), "state"))
	b, err := netns.New(netns.Options{Name: name, Prefix: "lvt-e"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Destroy(context.Background()) })

	lever := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		return code, out.String(), errb.String()
	}

	if code, _, e := lever("egress", "verify", "-c", cfg); code != 2 || !strings.Contains(e, "does not exist") {
		t.Errorf("verify before the jail exists: exit %d, %q", code, e)
	}
	code, out, e := lever("egress", "apply", "-c", cfg, "--json")
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, e)
	}
	var rep struct {
		Outcome     string   `json:"outcome"`
		Differences []string `json:"differences"`
		GuestCalls  int      `json:"guest_calls"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("apply --json: %v\n%s", err, out)
	}
	// Two guest calls: the snapshot, then the rebuild, which reads the chains back itself.
	if rep.Outcome != "rebuilt" || len(rep.Differences) != 4 || rep.GuestCalls != 2 {
		t.Errorf("first apply: %+v", rep)
	}
	if code, out, _ := lever("egress", "apply", "-c", cfg); code != 0 || !strings.Contains(out, "egress: verified unchanged") || !strings.Contains(out, "1 guest call") {
		t.Errorf("second apply: exit %d, %q", code, out)
	}
	if code, out, _ := lever("egress", "verify", "-c", cfg); code != 0 || !strings.Contains(out, "exact match") {
		t.Errorf("verify on a match: exit %d, %q", code, out)
	}
	tamper := exec.Command("ip", "netns", "exec", b.Namespace(), "iptables", "-w", "-A", "LEVER_EGRESS", "-d", "203.0.113.9/32", "-j", "ACCEPT")
	if o, err := tamper.CombinedOutput(); err != nil {
		t.Fatalf("tamper: %v %s", err, o)
	}
	code, out, _ = lever("egress", "verify", "-c", cfg)
	if code != 1 || !strings.Contains(out, "IPv4: extra rule at 13: `-A LEVER_EGRESS -d 203.0.113.9/32 -j ACCEPT`") {
		t.Errorf("verify on drift: exit %d, %q", code, out)
	}
	code, out, _ = lever("egress", "verify", "-c", cfg, "--json")
	var v struct {
		Match       bool     `json:"match"`
		Differences []string `json:"differences"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 1 || v.Match || len(v.Differences) != 2 {
		t.Errorf("verify --json on drift: exit %d, %v, %+v", code, err, v)
	}
	code, out, _ = lever("egress", "apply", "-c", cfg)
	if code != 0 || !strings.Contains(out, "egress: rebuilt") || !strings.Contains(out, "203.0.113.9") {
		t.Errorf("repairing apply: exit %d, %q", code, out)
	}
	code, out, _ = lever("egress", "plan", "-c", cfg, "--json")
	var p struct {
		Families []struct {
			Family       string `json:"family"`
			ChainRestore string `json:"chain_restore"`
			JumpRestore  string `json:"jump_restore"`
		} `json:"families"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 || len(p.Families) != 2 || p.Families[0].Family != "IPv6" || p.Families[1].Family != "IPv4" {
		t.Fatalf("plan --json: exit %d, %v, %s", code, err, out)
	}
	if !strings.Contains(p.Families[1].ChainRestore, "--dport 7443 -j ACCEPT") || !strings.Contains(p.Families[1].JumpRestore, "-D OUTPUT -j LEVER_EGRESS\n-I OUTPUT 1 -j LEVER_EGRESS") {
		t.Errorf("plan content: %+v", p.Families[1])
	}
	// Bad input: a config the loader refuses is exit 2 naming the key, and nothing runs.
	bad := filepath.Join(dir, "bad.yaml")
	testutil.LeverYAML{Name: name, Backend: "netns", Tree: "tree", Egress: "ajar"}.Write(t, bad)
	if code, _, e := lever("egress", "verify", "-c", bad); code != 2 || !strings.Contains(e, "egress") {
		t.Errorf("bad config: exit %d, %q", code, e)
	}
}

// A rule written with nft that iptables cannot translate, in the chain and ahead of the
// jump: before the nft cross-check `lever egress verify` and `apply` exited 2 (iptables -S
// refused the table) and left the rule in place. Now verify exits 1 naming it and apply
// repairs it. Positive control: iptables -S itself refuses the table while it is there.
func TestEgressCommandsNFTRuleE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft")
	dir := t.TempDir()
	name := fmt.Sprintf("n%d", os.Getpid()%1000000)
	os.Mkdir(filepath.Join(dir, "tree"), 0o755)
	os.WriteFile(filepath.Join(dir, "key"), []byte("sk-test\n"), 0o600)
	cfg := filepath.Join(dir, "lever.yaml")
	testutil.LeverYAML{Name: name, Backend: "netns", Tree: "tree", Egress: "open", ManagerPorts: []int{7443},
		Broker: testutil.YAMLBroker{LLMAuth: "api-key", APIKeyFile: "key"}}.Write(t, cfg)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv(netns.PrefixEnv, "lvt-e")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(t.TempDir(), "state"))
	b, err := netns.New(netns.Options{Name: name, Prefix: "lvt-e"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Destroy(context.Background()) })
	lever := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	in := func(argv ...string) (string, error) {
		o, err := exec.Command("ip", append([]string{"netns", "exec", b.Namespace()}, argv...)...).CombinedOutput()
		return string(o), err
	}
	if code, _, e := lever("egress", "apply", "-c", cfg); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, e)
	}
	for _, c := range []struct{ chain, where string }{{"LEVER_EGRESS", "add"}, {"OUTPUT", "insert"}} {
		t.Run(c.chain, func(t *testing.T) {
			if o, err := in("nft", c.where, "rule", "ip", "filter", c.chain, "numgen", "random", "mod", "2", "0", "accept"); err != nil {
				t.Fatalf("tamper: %v %s", err, o)
			}
			if o, err := in("iptables", "-w", "-S"); err == nil || !strings.Contains(o, "incompatible") {
				t.Fatalf("control: iptables -S should refuse the table: %v %s", err, o)
			}
			code, out, e := lever("egress", "verify", "-c", cfg)
			if code != 1 || !strings.Contains(out, "IPv4: iptables cannot list the filter table") || !strings.Contains(out, c.chain+" holds `numgen random mod 2 0 accept`") {
				t.Errorf("verify: exit %d, %q %q", code, out, e)
			}
			code, out, e = lever("egress", "apply", "-c", cfg)
			if code != 0 || !strings.Contains(out, "egress: rebuilt") || !strings.Contains(out, "numgen random mod 2 0 accept") {
				t.Errorf("apply: exit %d, %q %q", code, out, e)
			}
			if code, out, _ := lever("egress", "verify", "-c", cfg); code != 0 {
				t.Errorf("verify after apply: exit %d, %q", code, out)
			}
			if o, _ := in("nft", "list", "table", "ip", "filter"); strings.Contains(o, "numgen") {
				t.Errorf("the rule is still there:\n%s", o)
			}
		})
	}
}
