package brokerctl

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
)

// A /proc/<pid>/stat line with every field after comm; state and start time filled in.
func statLine(comm, state, start string) []byte {
	f := make([]string, 50)
	for i := range f {
		f[i] = "0"
	}
	f[0] = state
	f[19] = start
	return []byte("4242 (" + comm + ") " + strings.Join(f, " ") + "\n")
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []byte
		want    uint64
		wantErr string
	}{
		{"running", statLine("lever", "S", "123456"), 123456, ""},
		// A comm chosen to look like more fields must not shift the start time.
		{"hostile comm", statLine("a) Z 1 2 3 (b", "R", "77"), 77, ""},
		{"zombie", statLine("lever", "Z", "5"), 0, "exited"},
		{"dead", statLine("lever", "X", "5"), 0, "exited"},
		{"no comm", []byte("4242 lever S 1 2 3"), 0, "no comm"},
		{"short", []byte("4242 (lever) S 1 2 3"), 0, "fields after comm"},
		{"bad start", statLine("lever", "S", "soon"), 0, "start time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d %v, want %d", got, err, tc.want)
			}
		})
	}
	if _, err := parseProcStat(statLine("x", "Z", "1")); !errors.Is(err, errExited) {
		t.Fatalf("zombie error %v is not errExited", err)
	}
}

func TestParseCmdline(t *testing.T) {
	got := parseCmdline([]byte("/usr/bin/lever\x00broker\x00serve\x00--state\x00/x y\x00"))
	want := []string{"/usr/bin/lever", "broker", "serve", "--state", "/x y"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// procArgs2 builds a macOS kern.procargs2 buffer the way the kernel lays it out.
func procArgs2(argc int32, exe string, pad int, args ...string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(argc))
	b = append(b, exe...)
	b = append(b, make([]byte, 1+pad)...)
	for _, a := range args {
		b = append(append(b, a...), 0)
	}
	return b
}

func TestParseProcArgs2(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []byte
		want    []string
		wantErr string
	}{
		{"broker", procArgs2(3, "/opt/lever/bin/lever", 5, "lever", "broker", "serve", "HOME=/Users/a", "PATH=/bin"),
			[]string{"lever", "broker", "serve"}, ""},
		{"no padding", procArgs2(2, "/bin/x", 0, "x", "", "ENV=1"), []string{"x", ""}, ""},
		{"no args", procArgs2(0, "/bin/x", 3), []string{}, ""},
		{"truncated", procArgs2(3, "/bin/x", 1, "x", "y"), nil, "2 of 3"},
		{"negative argc", procArgs2(-1, "/bin/x", 1, "x"), nil, "bad argc"},
		{"huge argc", procArgs2(1<<30, "/bin/x", 1, "x"), nil, "bad argc"},
		{"short", []byte{1, 0}, nil, "short"},
		{"unterminated path", binary.LittleEndian.AppendUint32(nil, 1), nil, "unterminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcArgs2(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q %v, want %q", got, err, tc.want)
			}
		})
	}
}

func TestDarwinStartTime(t *testing.T) {
	// Two starts a microsecond apart differ; the same start is the same number.
	a, b := darwinStartTime(1_700_000_000, 999_999), darwinStartTime(1_700_000_001, 0)
	if b-a != 1 || darwinStartTime(1_700_000_000, 999_999) != a {
		t.Fatalf("start times %d %d", a, b)
	}
}
