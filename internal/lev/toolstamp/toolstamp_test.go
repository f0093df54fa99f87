package toolstamp

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStampRoundTrip: a rendered script verifies and names its run, workdir and time; any
// change to its bytes, a removed or forged stamp line, fails verification.
func TestStampRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	for _, script := range []string{"#!/bin/sh\necho hi\n", "echo no shebang\n", "#!/bin/sh", "", "#!/bin/sh\n"} {
		f := Render([]byte(script), "r-1", "/w d", at)
		s, err := Verify(f)
		if err != nil || s.Run != "r-1" || s.Workdir != "/w d" || !s.Time.Equal(at) {
			t.Fatalf("%q: %+v %v\n%s", script, s, err, f)
		}
		if strings.HasPrefix(script, "#!") && strings.Contains(script, "\n") && !strings.HasPrefix(string(f), "#!/bin/sh\n"+Prefix) {
			t.Fatalf("%q: the #! line must stay first:\n%s", script, f)
		}
	}
	f := string(Render([]byte("#!/bin/sh\necho hi\n"), "r-1", "/w", at))
	for _, tc := range []struct {
		name, file string
		want       error
	}{
		{"body changed", strings.Replace(f, "echo hi", "curl evil", 1), ErrTampered},
		{"line appended", f + "rm -rf ~\n", ErrTampered},
		{"stamp removed", "#!/bin/sh\necho hi\n", ErrUnstamped},
		{"stamp forged with an extra key", strings.Replace(f, `{"sha256"`, `{"trusted":true,"sha256"`, 1), ErrUnstamped},
		{"stamp moved down", "#!/bin/sh\necho hi\n" + Prefix + `{"sha256":"x","run":"r"}` + "\n", ErrUnstamped},
	} {
		if _, err := Verify([]byte(tc.file)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{"fmt": true, "run-tests_2": true, "../x": false, "a/b": false, ".hidden": false, "A": false, "": false, "x.sh": false, strings.Repeat("a", 65): false} {
		if (CheckName(name) == nil) != ok {
			t.Errorf("%q: ok=%v", name, !ok)
		}
	}
}
