package mountcheck

import (
	"bytes"
	"strings"
	"testing"
)

// TestServeLiveRefusesBadRequests: a request the helper (root in the guest) must not act
// on is refused before anything is asked of podman, naming what is wrong. Control: a
// request naming no container answers an empty proof.
func TestServeLiveRefusesBadRequests(t *testing.T) {
	many := `{"run_user":"root","containers":[` + strings.TrimSuffix(strings.Repeat(`{"name":"c","tree":"/t","mounts":[]},`, MaxLive+1), ",") + `]}`
	for _, tc := range []struct{ name, req, want string }{
		{"a channel climbing out of the runtime dir", `{"run_user":"root","containers":[{"name":"c","tree":"/t","mounts":[],"channel":"../../etc/x"}]}`, `channel "../../etc/x" is not a clean path`},
		{"an absolute channel", `{"run_user":"root","containers":[{"name":"c","tree":"/t","mounts":[],"channel":"/etc/x"}]}`, `channel "/etc/x" is not a clean path`},
		{"an unknown key", `{"run_user":"root","pid":1}`, `unknown field "pid"`},
		{"an unknown run user", `{"run_user":"no-such-user-lvtb","containers":[]}`, `run user "no-such-user-lvtb"`},
		{"too many containers", many, "over the cap of 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := ServeLive(strings.NewReader(tc.req), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) || out.Len() != 0 {
				t.Fatalf("want an error containing %q and no answer, got %v, %q", tc.want, err, out.String())
			}
		})
	}
	var out bytes.Buffer
	if err := ServeLive(strings.NewReader(`{"run_user":"root","containers":[]}`), &out); err != nil || strings.TrimSpace(out.String()) != `{"proofs":{}}` {
		t.Fatalf("control: %v %q", err, out.String())
	}
}
