package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
)

func registeredNames() []string {
	var n []string
	for _, d := range backend.All() {
		n = append(n, d.Profile.Name)
	}
	return n
}

// The matrix, the registry and config's accepted names are one set: a backend cannot be
// registered without a row, and config cannot accept a name no backend registered (it
// would fail at bring-up, or worse, tempt a fallback).
func TestMatrixCoversEveryBackend(t *testing.T) {
	var out bytes.Buffer
	if code := Main([]string{"backends", "--json"}, &out, &out); code != 0 {
		t.Fatalf("lever backends --json exited %d: %s", code, out.String())
	}
	var m matrixOut
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out.String())
	}
	var rows []string
	for _, r := range m.Backends {
		rows = append(rows, r.Name)
	}
	reg := registeredNames()
	accepted := slices.Clone(config.Backends)
	slices.Sort(accepted)
	if diff := cmp.Diff(reg, rows); diff != "" {
		t.Errorf("matrix rows vs registered backends (-registered +rows):\n%s", diff)
	}
	if diff := cmp.Diff(reg, accepted); diff != "" {
		t.Errorf("registered backends vs config.Backends (-registered +config):\n%s", diff)
	}
	if len(reg) < 3 {
		t.Errorf("only %d backends registered: %v", len(reg), reg)
	}
	for _, name := range reg {
		if _, ok := backend.Lookup(name); !ok {
			t.Errorf("%s: Lookup fails", name)
		}
	}
}

// Every row states every column, and a backend without a hypervisor boundary says in
// its caveats that it fails guarantee 0.
func TestEveryProfileIsComplete(t *testing.T) {
	for _, d := range backend.All() {
		p := d.Profile
		for col, v := range map[string]string{"kernel": p.Kernel, "filesystem_bound": p.FilesystemBound, "egress_enforced": p.EgressEnforced, "rootless_runtime": p.RootlessRuntime} {
			if strings.TrimSpace(v) == "" {
				t.Errorf("%s: column %s is empty", p.Name, col)
			}
		}
		if len(p.Caveats) == 0 {
			t.Errorf("%s: no caveats", p.Name)
		}
		if d.Probe == nil || d.New == nil {
			t.Errorf("%s: descriptor lacks Probe or New", p.Name)
		}
		if !p.HypervisorBoundary && !slices.ContainsFunc(p.Caveats, func(c string) bool { return strings.Contains(c, "guarantee 0") }) {
			t.Errorf("%s has no hypervisor boundary but no caveat says it fails guarantee 0", p.Name)
		}
	}
	nd, ok := backend.Lookup("netns")
	if !ok || nd.Profile.HypervisorBoundary || !strings.HasPrefix(nd.Profile.Kernel, "shared") {
		t.Errorf("netns must fail guarantee 0 with a shared kernel: %+v", nd.Profile)
	}
}

// The text form, exactly, for two stand-in backends: the usable column carries tool,
// version and the reason it is not usable.
func TestPrintMatrix(t *testing.T) {
	descs := []backend.Descriptor{
		{Profile: backend.Profile{Name: "vm", HypervisorBoundary: true, Kernel: "separate from host (one guest kernel)", FilesystemBound: "the tree only", EgressEnforced: "in the VM", RootlessRuntime: "podman", Caveats: []string{"c1"}},
			Probe: func(context.Context) backend.Availability {
				return backend.Availability{Usable: true, Tool: "/usr/bin/vmctl", Version: "1.2.2", Accelerator: "tcg", AcceleratorWhy: "/dev/kvm is mode 0600 root:root"}
			}},
		{Profile: backend.Profile{Name: "ns", Kernel: "shared with host", FilesystemBound: "none", EgressEnforced: "in the namespace", RootlessRuntime: "podman", Caveats: []string{"fails guarantee 0"}},
			Probe: func(context.Context) backend.Availability {
				return backend.Availability{Tool: "/usr/sbin/ip", Reason: "needs root"}
			}},
	}
	var out bytes.Buffer
	if err := printMatrix(&out, buildMatrix(context.Background(), descs)); err != nil {
		t.Fatal(err)
	}
	want := `BACKEND  GUARANTEE 0  KERNEL              USABLE HERE
vm       holds        separate from host  yes
ns       FAILS        shared with host    no

vm
  hypervisor boundary (guarantee 0): holds: a hypervisor boundary separates the agents from the host kernel
  kernel:            separate from host (one guest kernel)
  filesystem bound:  the tree only
  egress enforced:   in the VM
  rootless runtime:  podman
  usable here now:   yes (/usr/bin/vmctl, version 1.2.2)
  accelerator:       tcg (/dev/kvm is mode 0600 root:root)
  caveats:
    - c1

ns
  hypervisor boundary (guarantee 0): FAILS: no hypervisor boundary between the agents and the host kernel
  kernel:            shared with host
  filesystem bound:  none
  egress enforced:   in the namespace
  rootless runtime:  podman
  usable here now:   no (/usr/sbin/ip): needs root
  caveats:
    - fails guarantee 0
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("matrix text (-want +got):\n%s", diff)
	}
}
