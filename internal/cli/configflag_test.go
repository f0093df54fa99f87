package cli

import (
	"bytes"

	"github.com/spf13/cobra"
	"path/filepath"
	"strings"
	"testing"
)

// Every command that takes [CONFIG] takes -c/--config too, the way the host commands do:
// the same plan either way; a -c naming a missing file is refused naming it; with neither,
// ./lever.yaml is the one asked for.
func TestConfigFlagOnEveryConfigCommand(t *testing.T) {
	cfg := egressConfig(t, "closed")
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	plan := []string{"egress", "plan", "--alias-v4", "10.1.2.3", "--alias-v6", "fd00::3"}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	_, positional, _ := run(append(append([]string{}, plan...), cfg)...)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"positional (control)", append(append([]string{}, plan...), cfg), 0, positional},
		{"-c", append(append([]string{}, plan...), "-c", cfg), 0, positional},
		{"--config=", append(append([]string{}, plan...), "--config="+cfg), 0, positional},
		{"-c names a missing file", append(append([]string{}, plan...), "-c", missing), 2, "nope.yaml"},
		{"status -c names a missing file", []string{"status", "-c", missing}, 2, "nope.yaml"},
		{"destroy -c names a missing file", []string{"destroy", "-c", missing}, 2, "nope.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s%s", code, tc.wantCode, out, errs)
			}
			if tc.wantCode == 0 && out != tc.want {
				t.Errorf("output differs from the positional form:\n%s", out)
			}
			if tc.wantCode != 0 && !strings.Contains(errs, tc.want) {
				t.Errorf("error %q does not name %s", errs, tc.want)
			}
		})
	}
	if positional == "" || !strings.Contains(positional, "LEVER_EGRESS") {
		t.Fatalf("control: the positional plan printed %q", positional)
	}
	// Every [CONFIG] command has the flag (the walk in NewRoot missed none).
	var missingFlag []string
	for _, c := range allCommands(NewRoot(&bytes.Buffer{}, &bytes.Buffer{})) {
		if strings.Contains(c.Use, "[CONFIG]") && c.Flags().Lookup("config") == nil {
			missingFlag = append(missingFlag, c.CommandPath())
		}
	}
	if len(missingFlag) > 0 {
		t.Errorf("commands taking [CONFIG] without -c: %v", missingFlag)
	}
}

func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}
