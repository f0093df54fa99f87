package sandbox

import (
	"strings"
	"testing"
)

// The workbench gets its own PATH and HOME and nothing that names lev's container.
func TestBenchEnv(t *testing.T) {
	const git = " GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0=*"
	for _, tc := range []struct {
		name string
		in   []string
		want string
	}{
		{"lev's container env", []string{"PATH=/", "HOME=/tmp/lev", "SSL_CERT_DIR=/etc/ssl/certs", "LEV_HOME=/var/lib/lev", "LEV_BENCH_SOCKET=/run/lever-bench/exec.sock", "LEVER_ROLE=manager", "TERM=xterm"},
			"TERM=xterm " + benchPath + " HOME=/tmp" + git},
		{"empty", nil, benchPath + " HOME=/tmp" + git},
		{"a key that only starts like LEV; a GIT_CONFIG_ of lev's own is replaced", []string{"LEVEL=3", "GIT_AUTHOR_NAME=a", "GIT_CONFIG_COUNT=9"}, "LEVEL=3 GIT_AUTHOR_NAME=a " + benchPath + " HOME=/tmp" + git},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(benchEnv(tc.in), " "); got != tc.want {
				t.Errorf("benchEnv(%q)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}
