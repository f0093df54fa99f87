package taint

import "testing"

// TestHostForms: every spelling of one address or name that a client (libc inet_aton,
// WHATWG URL, curl, Go) reaches comes out as one canonical target, so a deny rule on that
// target sees it; what clients disagree on stays unclear. Each attack row has a control
// row: the plain spelling of the same place.
func TestHostForms(t *testing.T) {
	for _, tc := range []struct {
		url, want string
		unclear   bool
	}{
		// Controls: the plain forms.
		{"http://127.0.0.1/", "127.0.0.1", false},
		{"http://evil.test/", "evil.test", false},
		{"http://[::1]/", "::1", false},
		// IPv4 spellings inet_aton, WHATWG and curl read as 127.0.0.1.
		{"http://2130706433/", "127.0.0.1", false},
		{"http://0177.0.0.1/", "127.0.0.1", false},
		{"http://0x7f.0.0.1/", "127.0.0.1", false},
		{"http://0X7F.1/", "127.0.0.1", false},
		{"http://0x7f000001/", "127.0.0.1", false},
		{"http://017700000001/", "127.0.0.1", false},
		{"http://127.1/", "127.0.0.1", false},
		{"http://127.0.1/", "127.0.0.1", false},
		{"http://0x7f.0.1/", "127.0.0.1", false},
		{"http://0177.0x0.1/", "127.0.0.1", false},
		{"http://127.000.000.001/", "127.0.0.1", false},
		{"http://127.0.0.1./", "127.0.0.1", false},
		{"http://2130706433.:8080/", "127.0.0.1", false},
		{"http://user:pw@0x7f.1:80/x", "127.0.0.1", false},
		{"http://0/", "0.0.0.0", false},
		{"http://0x/", "0.0.0.0", false},
		{"http://169.254.43518/", "169.254.169.254", false},
		// IPv6 forms, IPv4-mapped ones as their IPv4 address.
		{"http://[::ffff:127.0.0.1]/", "127.0.0.1", false},
		{"http://[::ffff:7f00:1]/", "127.0.0.1", false},
		{"http://[0:0:0:0:0:ffff:7f00:0001]/", "127.0.0.1", false},
		{"http://[0:0:0:0:0:0:0:1]/", "::1", false},
		{"http://[FE80::1]/", "fe80::1", false},
		// Percent-encoding, case, IDNA.
		{"http://%31%32%37.0.0.1/", "127.0.0.1", false},
		{"http://evil%2etest/", "evil.test", false},
		{"http://%65vil.test/", "evil.test", false},
		{"http://EVIL.Test/", "evil.test", false},
		{"http://\uff45vil.test/", "evil.test", false},           // full-width e
		{"http://\uff11\uff12\uff17.0.0.1/", "127.0.0.1", false}, // full-width digits
		{"http://evil\u3002test/", "evil.test", false},           // ideographic full stop
		{"http://b\u00fccher.example/", "xn--bcher-kva.example", false},
		// Unclear: no address clients agree on.
		{"http://256.0.0.1/", "", true},
		{"http://1.2.3.4.5/", "", true},
		{"http://127.0.0.1../", "", true},
		{"http://4294967296/", "", true},
		{"http://127.16777216/", "", true},
		{"http://08.0.0.1/", "", true},
		{"http://0x1g.0.0.1/", "", true},
		{"http://foo.123/", "", true},
		{"http://evil%zztest/", "", true},
		{"http://evil%2ftest/", "", true},
		{"http://[fe80::1%25eth0]/", "", true},
		{"http://fa\u00df.example/", "", true}, // ß: transitional and not disagree
		{"http://a..b/", "", true},
	} {
		got, why := Target("http_get", map[string]any{"url": tc.url})
		if tc.unclear {
			if why == "" || got != tc.url {
				t.Errorf("%s: got %q (unclear %q), want unclear with the raw text", tc.url, got, why)
			}
			continue
		}
		if got != tc.want || why != "" {
			t.Errorf("%s: got %q (unclear %q), want %q", tc.url, got, why, tc.want)
		}
	}
}
