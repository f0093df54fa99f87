package sandbox

import (
	"strings"
	"testing"
)

// The workbench gets its own PATH and HOME and nothing that names lev's container.
func TestBenchEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want string
	}{
		{"lev's container env", []string{"PATH=/", "HOME=/tmp/lev", "SSL_CERT_DIR=/etc/ssl/certs", "LEV_HOME=/var/lib/lev", "LEV_BENCH_SOCKET=/run/lever-bench/exec.sock", "LEVER_ROLE=manager", "TERM=xterm"},
			"TERM=xterm " + benchPath + " HOME=/tmp"},
		{"empty", nil, benchPath + " HOME=/tmp"},
		{"a key that only starts like LEV", []string{"LEVEL=3", "GIT_AUTHOR_NAME=a"}, "LEVEL=3 GIT_AUTHOR_NAME=a " + benchPath + " HOME=/tmp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(benchEnv(tc.in), " "); got != tc.want {
				t.Errorf("benchEnv(%q)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}
