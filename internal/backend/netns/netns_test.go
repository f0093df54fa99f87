package netns

import (
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend"
)

func TestNewDeterministic(t *testing.T) {
	for _, name := range []string{"a", "dev", "a-much-longer-instance-name-than-usual"} {
		b1, err := New(Options{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := New(Options{Name: name})
		h1, h6 := b1.HostAddrs()
		g1, g6 := b1.GuestAddrs()
		h2, _ := b2.HostAddrs()
		if h1 != h2 || b1.hostVeth != b2.hostVeth {
			t.Errorf("%s: not deterministic", name)
		}
		if b1.Namespace() != "lever-"+name {
			t.Errorf("namespace %q", b1.Namespace())
		}
		if len(b1.hostVeth) > 15 || len(b1.guestVeth) > 15 {
			t.Errorf("veth names too long for the kernel: %s %s", b1.hostVeth, b1.guestVeth)
		}
		if !strings.HasPrefix(h1.String(), "10.233.") || !h1.Is4() || g1.Next() == h1 || h1.Next() != g1 {
			t.Errorf("IPv4 pair %v %v", h1, g1)
		}
		if !h6.Is6() || !strings.HasPrefix(h6.String(), "fd6c:6576:6572:") || h6.Next() != g6 {
			t.Errorf("IPv6 pair %v %v", h6, g6)
		}
	}
	other, _ := New(Options{Name: "dev", Prefix: "lvt-e"})
	if other.Namespace() != "lvt-edev" {
		t.Errorf("prefix ignored: %s", other.Namespace())
	}
	if _, err := New(Options{}); err == nil {
		t.Error("empty name accepted")
	}
	if _, err := New(Options{Name: "a b"}); err == nil {
		t.Error("space in name accepted")
	}
}

func TestProfileFailsGuaranteeZero(t *testing.T) {
	d, ok := backend.Lookup("netns")
	if !ok {
		t.Fatal("netns not registered")
	}
	if d.Profile.HypervisorBoundary || d.Profile.Kernel != "shared with host" {
		t.Errorf("profile claims more than a namespace gives: %+v", d.Profile)
	}
}

func TestProbeRefusesWithoutOptIn(t *testing.T) {
	t.Setenv("LEVER_DEV_NETNS", "")
	if a := Probe(t.Context()); a.Usable {
		t.Errorf("usable without LEVER_DEV_NETNS=1: %+v", a)
	}
}
