package bringup

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAssembledScriptsCheck: the observation call's script as assembled (stamp reader,
// state digest, observation, egress snapshot) parses in sh and passes shellcheck, which
// `make lint` runs on each part file; here the parts are checked together, so a function
// one part calls and another defines is seen. A syntax error planted in the assembled
// text is caught (the checks can fail).
func TestAssembledScriptsCheck(t *testing.T) {
	j := healthyJail(t)
	req := j.in.Spec.RebuildRequest()
	sc, _ := j.in.observeScript(&req)
	check := func(text string) error {
		c := exec.Command("sh", "-n")
		c.Stdin = strings.NewReader(text)
		if out, err := c.CombinedOutput(); err != nil {
			return &exec.ExitError{Stderr: out}
		}
		if _, err := exec.LookPath("shellcheck"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("shellcheck is not installed (Debian package shellcheck)")
			}
			t.Log("shellcheck not installed: sh -n only")
			return nil
		}
		c = exec.Command("shellcheck", "-s", "sh", "-S", "warning", "-")
		c.Stdin = strings.NewReader(text)
		if out, err := c.CombinedOutput(); err != nil {
			t.Logf("%s", out)
			return err
		}
		return nil
	}
	if err := check(sc.Text()); err != nil {
		t.Fatalf("the observation script: %v", err)
	}
	if err := check(sc.Text() + "\nif then fi\n"); err == nil {
		t.Fatal("a broken script passed the checks")
	}
}
