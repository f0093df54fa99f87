package probes

import "testing"

// TestAim: the alias placeholders are filled from the snapshot's aliases; an IPv6 alias
// is probed only when global; every other address is left as the host wrote it.
func TestAim(t *testing.T) {
	ps := []Probe{{ID: "md", Addr: "169.254.169.254:80"}, {ID: "a", Addr: Alias4 + ":22"}, {ID: "lo", Kind: "loopback"}, {ID: "a6", Addr: Alias6 + ":9"}}
	for _, tc := range []struct {
		v4, v6 string
		want   map[string]string
	}{
		{"10.0.2.2", "2001:db8::2", map[string]string{"md": "169.254.169.254:80", "a": "10.0.2.2:22", "lo": "", "a6": "[2001:db8::2]:9"}},
		{"10.0.2.2", "fd00::2", map[string]string{"md": "169.254.169.254:80", "a": "10.0.2.2:22", "lo": ""}},
		{"", "fe80::1", map[string]string{"md": "169.254.169.254:80", "a": ":22", "lo": ""}},
		{"10.0.2.2", "::ffff:10.0.2.2", map[string]string{"md": "169.254.169.254:80", "a": "10.0.2.2:22", "lo": ""}},
	} {
		got := map[string]string{}
		for _, p := range Aim(ps, tc.v4, tc.v6) {
			got[p.ID] = p.Addr
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s/%s: aimed %v, want %v", tc.v4, tc.v6, got, tc.want)
		}
		for id, a := range tc.want {
			if got[id] != a {
				t.Errorf("%s/%s: %s at %q, want %q", tc.v4, tc.v6, id, got[id], a)
			}
		}
	}
}
