// Package testutil holds what the end-to-end tests share: the root and tool gates (a skip,
// or under CI=true a failure), the lock that serialises the tests that boot a VM,
// StandIn, a scripted model upstream for tests that run a real agent behind the broker,
// and LeverYAML, the one builder of the lever.yaml files the tests write.
//
// It must never be imported by non-test code, and must not create or change anything on
// the host beyond its lock file: namespaces and rules belong to the test that makes them.
package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// RequireRoot skips an end-to-end test when not root, with a message, except under CI
// (CI=true), where a skipped e2e test would hide a missing capability and so fails.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("end-to-end test needs root, and under CI=true a skipped e2e test is a failure")
	}
	t.Skip("end-to-end test needs root (network namespaces, iptables, podman); run `sudo make e2e`")
}

// RequireTool skips (or under CI fails) when a binary the test drives is not installed.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("end-to-end test needs %s on PATH; .ci/run must install it", name)
	}
	t.Skipf("end-to-end test needs %s on PATH", name)
	return ""
}
