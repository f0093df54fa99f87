package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// LeverYAML is a lever.yaml as the end-to-end tests write one: the one builder, so a test
// names the keys it cares about and a renamed key is changed in one place, not in a dozen
// format strings. Empty fields are left out (lever.yaml's own defaults apply); it renders
// only keys lever.yaml has (config.Parse, strict, would refuse any other).
type LeverYAML struct {
	Name    string
	Backend string
	Tree    string
	Egress  string
	Disk    string
	// ManagerPorts is manager.allow_ports.
	ManagerPorts []int
	Workers      []YAMLWorker
	Broker       YAMLBroker
	Lima         *YAMLLima
	Lev          YAMLLev
}

// YAMLWorker is one entry of workers.
type YAMLWorker struct {
	Name, Dir, LLMAuth string
}

// YAMLBroker is the broker section.
type YAMLBroker struct {
	LLMAuth     string
	APIKeyFile  string
	LLMUpstream string
	JailPort    int
	AdminPort   int
}

// YAMLLima is the lima section.
type YAMLLima struct {
	Image, Kernel, Initrd, Limactl, Accel string
	CPUs                                  int
	Memory                                string
}

// YAMLLev is the lev section.
type YAMLLev struct {
	Config, Agents, Policy string
}

// NetnsYAML is the usual netns test jail: backend netns, the tree at tree/, egress closed,
// the broker holding an API key from keyFile for the model upstream at upstream (a URL
// without /v1; "" leaves the upstream out) on the given ports.
func NetnsYAML(name, keyFile, upstream string, jailPort, adminPort int) LeverYAML {
	y := LeverYAML{Name: name, Backend: "netns", Tree: "tree", Egress: "closed",
		Broker: YAMLBroker{LLMAuth: "api-key", APIKeyFile: keyFile, JailPort: jailPort, AdminPort: adminPort}}
	if upstream != "" {
		y.Broker.LLMUpstream = upstream + "/v1"
	}
	return y
}

// String renders y in lever.yaml's usual layout (two-space indent, flow lists).
func (y LeverYAML) String() string {
	var b strings.Builder
	kv := func(indent, k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s%s: %s\n", indent, k, v)
		}
	}
	num := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	kv("", "name", y.Name)
	kv("", "backend", y.Backend)
	kv("", "tree", y.Tree)
	kv("", "egress", y.Egress)
	kv("", "disk", y.Disk)
	if len(y.ManagerPorts) > 0 {
		ps := make([]string, len(y.ManagerPorts))
		for i, p := range y.ManagerPorts {
			ps[i] = strconv.Itoa(p)
		}
		fmt.Fprintf(&b, "manager:\n  allow_ports: [%s]\n", strings.Join(ps, ", "))
	}
	if len(y.Workers) > 0 {
		b.WriteString("workers:\n")
		for _, w := range y.Workers {
			fmt.Fprintf(&b, "  - name: %s\n", w.Name)
			kv("    ", "dir", w.Dir)
			kv("    ", "llm_auth", w.LLMAuth)
		}
	}
	if y.Broker != (YAMLBroker{}) {
		b.WriteString("broker:\n")
		kv("  ", "llm_auth", y.Broker.LLMAuth)
		kv("  ", "api_key_file", y.Broker.APIKeyFile)
		kv("  ", "llm_upstream", y.Broker.LLMUpstream)
		kv("  ", "jail_port", num(y.Broker.JailPort))
		kv("  ", "admin_port", num(y.Broker.AdminPort))
	}
	if l := y.Lima; l != nil {
		b.WriteString("lima:\n")
		kv("  ", "image", l.Image)
		kv("  ", "kernel", l.Kernel)
		kv("  ", "initrd", l.Initrd)
		kv("  ", "limactl", l.Limactl)
		kv("  ", "accel", l.Accel)
		kv("  ", "cpus", num(l.CPUs))
		kv("  ", "memory", l.Memory)
	}
	if y.Lev != (YAMLLev{}) {
		b.WriteString("lev:\n")
		kv("  ", "config", y.Lev.Config)
		kv("  ", "agents", y.Lev.Agents)
		kv("  ", "policy", y.Lev.Policy)
	}
	return b.String()
}

// Write writes y to path (mode 0644), failing the test when it cannot.
func (y LeverYAML) Write(t testing.TB, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(y.String()), 0o644); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}
