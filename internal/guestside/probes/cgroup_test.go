package probes

import "testing"

// TestV2Limits: the limits are read from the cgroup the kernel names for the process, never
// from a path it could steer out of /sys/fs/cgroup, and absent files read as "" (a FAIL in
// the check, not a pass).
func TestV2Limits(t *testing.T) {
	files := map[string]string{
		"/sys/fs/cgroup/user.slice/libpod-abc.scope/pids.max":   "512",
		"/sys/fs/cgroup/user.slice/libpod-abc.scope/memory.max": "2147483648",
		"/sys/fs/cgroup/pids.max":                               "1",
	}
	read := func(p string) string { return files[p] }
	for _, c := range []struct {
		name, proc, pids, mem string
	}{
		{"v2 line", "0::/user.slice/libpod-abc.scope\n", "512", "2147483648"},
		{"v1 lines before the v2 one", "1:name=systemd:/x\n0::/user.slice/libpod-abc.scope", "512", "2147483648"},
		{"no v2 line", "1:pids:/user.slice/libpod-abc.scope\n", "", ""},
		{"dot-dot refused", "0::/../../sys/fs/cgroup\n", "", ""},
		{"unknown cgroup", "0::/elsewhere\n", "", ""},
		{"empty", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, m := v2Limits(c.proc, read)
			if p != c.pids || m != c.mem {
				t.Errorf("v2Limits(%q) = %q, %q; want %q, %q", c.proc, p, m, c.pids, c.mem)
			}
		})
	}
}
