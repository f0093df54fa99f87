package capread

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

func TestMCPStdioLineCap(t *testing.T) {
	// A real child process: one good line, then a 3 MiB line with no end in sight.
	cmd := exec.Command("sh", "-c", `echo '{"jsonrpc":"2.0","id":1}'; head -c 3145728 /dev/zero | tr '\0' x; sleep 30`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lr := MCPLines(out)
	line, err := lr.Line()
	if err != nil || string(line) != `{"jsonrpc":"2.0","id":1}` {
		t.Fatalf("first line %q, %v", line, err)
	}
	_, err = lr.Line()
	if err == nil || err.Error() != "line exceeded 1 MiB from the MCP server" {
		t.Fatalf("err = %v", err)
	}
}

func TestLineReaderBoundaries(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		limit   int
		want    []string
		wantCap bool
	}{
		{"exactly at the limit", strings.Repeat("a", 8) + "\n", 8, []string{strings.Repeat("a", 8)}, false},
		{"crlf at the limit", strings.Repeat("a", 8) + "\r\n", 8, []string{strings.Repeat("a", 8)}, false},
		{"one past", strings.Repeat("a", 9) + "\n", 8, nil, true},
		{"unterminated tail", "ab\ncd", 8, []string{"ab", "cd"}, false},
		{"unterminated past", "ab\n" + strings.Repeat("c", 20), 8, []string{"ab"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lr := NewLineReader(strings.NewReader(tc.in), tc.limit, "line", "peer")
			var got []string
			var err error
			for {
				var l []byte
				l, err = lr.Line()
				if err != nil {
					break
				}
				got = append(got, string(l))
			}
			if tc.wantCap != IsCap(err) || (!tc.wantCap && !errors.Is(err, io.EOF)) {
				t.Fatalf("err = %v, want cap=%v", err, tc.wantCap)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("lines %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReadAll(t *testing.T) {
	b, err := ReadAll(bytes.NewReader(make([]byte, 3<<20)), -1, 3<<20, "response body", "h")
	if err != nil || len(b) != 3<<20 {
		t.Fatalf("at cap: %d %v", len(b), err)
	}
	_, err = ReadAll(bytes.NewReader(make([]byte, 3<<20+1)), -1, 3<<20, "response body", "h")
	if err == nil || err.Error() != "response body exceeded 3 MiB from h" {
		t.Fatalf("past cap: %v", err)
	}
	_, err = ReadAll(bytes.NewReader(nil), 4<<20, 3<<20, "response body", "h")
	if !IsCap(err) {
		t.Fatalf("declared past cap: %v", err)
	}
}
