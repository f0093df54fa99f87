package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/runner"
)

// TestBinaryRecordCapsEachCallsArgs drives the real lev daemon: a scripted model sends
// calls whose arguments are megabytes (refused before they decode: an unknown key; and a
// write_file that runs). tool_calls.jsonl keeps at most runner.MaxRecordArgs of each
// call's arguments, says where it cut and carries the SHA-256 of the whole (before the
// fix a refused call's raw arguments, as large as the provider's response, went to disk
// whole on every call). Positive controls: the same calls with small arguments are kept
// verbatim, and the big write really reached the file (whole).
func TestBinaryRecordCapsEachCallsArgs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	d := startDaemon(t, bin, "")
	big := strings.Repeat("A", 3<<20)
	bigWrite := strings.Repeat("w", 1<<20)
	probes := []struct {
		name, tool, args string
		capped, refused  bool
	}{
		{"refused, big", "read_file", `{"path": "x.txt", "junk": "` + big + `"}`, true, true},
		{"refused, small (control)", "read_file", `{"path": "x.txt", "junk": "small-junk-marker"}`, false, true},
		{"ran, big", "write_file", `{"path": "big.txt", "content": "` + bigWrite + `"}`, true, false},
		{"ran, small (control)", "write_file", `{"path": "small.txt", "content": "small-write-marker"}`, false, false},
	}
	var sc strings.Builder
	for i, p := range probes {
		fmt.Fprintf(&sc, "[[rule]]\nturn = %d\n[[rule.call]]\ntool = %q\nargs = '%s'\n\n", i+1, p.tool, p.args)
	}
	fmt.Fprintf(&sc, "[[rule]]\nturn = %d\ntext = \"done\"\n", len(probes)+1)
	mustWrite(t, d.scriptFile, sc.String())
	mustWrite(t, filepath.Join(d.levHome, "agents", "rec.toml"), fmt.Sprintf("name = \"rec\"\nversion = \"1\"\n[stages.s]\nmax_turns = %d\ntools = [\"read_file\", \"write_file\"]\n", len(probes)+2))

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rec, err := d.client.Spawn(ctx, runner.Spec{Agent: "rec", Workdir: d.wd})
	if err == nil {
		rec, err = d.client.Wait(ctx, rec.ID, 50*time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, d.log.String())
	}
	if rec.Status != runner.StatusCompleted {
		t.Fatalf("status %s: %s", rec.Status, rec.Error)
	}
	runDir := filepath.Join(d.levHome, "runs", rec.ID)
	raw, err := os.ReadFile(filepath.Join(runDir, "stages", "0", "tool_calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// Four lines, each within the cap plus its fixed fields (JSON escapes of the head
	// could at most sextuple it; the head here is plain ASCII).
	if len(raw) > 4*(runner.MaxRecordArgs+16<<10) {
		t.Errorf("tool_calls.jsonl is %d bytes for four calls", len(raw))
	}
	lines := readCalls(t, runDir)
	if len(lines) != len(probes) {
		t.Fatalf("%d calls recorded, want %d", len(lines), len(probes))
	}
	for i, p := range probes {
		l := lines[i]
		if (l.Refusal != nil) != p.refused {
			t.Errorf("%s: refusal %+v, want refused=%v", p.name, l.Refusal, p.refused)
		}
		var tr struct {
			TruncatedAt int    `json:"truncated_at"`
			Bytes       int    `json:"bytes"`
			SHA256      string `json:"sha256"`
			Head        string `json:"head"`
		}
		json.Unmarshal(l.Args, &tr)
		if !p.capped {
			if tr.TruncatedAt != 0 || !strings.Contains(string(l.Args), "marker") {
				t.Errorf("%s: args not kept verbatim: %.200s", p.name, l.Args)
			}
			continue
		}
		if len(l.Args) > runner.MaxRecordArgs+1024 || tr.TruncatedAt != runner.MaxRecordArgs || len(tr.Head) > runner.MaxRecordArgs || tr.Bytes <= runner.MaxRecordArgs {
			t.Errorf("%s: args %d bytes, marker %d/%d, head %d", p.name, len(l.Args), tr.TruncatedAt, tr.Bytes, len(tr.Head))
			continue
		}
		// The hash is of the whole arguments as the record would have held them: the
		// decoded arguments re-encoded, or a refused call's raw bytes as a JSON string.
		var whole []byte
		if p.refused {
			whole, _ = json.Marshal(p.args)
		} else {
			whole = []byte(`{"path":"big.txt","content":"` + bigWrite + `"}`)
		}
		sum := sha256.Sum256(whole)
		if tr.SHA256 != hex.EncodeToString(sum[:]) || tr.Bytes != len(whole) {
			t.Errorf("%s: sha256 %s bytes %d, want %x %d", p.name, tr.SHA256, tr.Bytes, sum, len(whole))
		}
	}
	if b, _ := os.ReadFile(filepath.Join(d.wd, "big.txt")); string(b) != bigWrite {
		t.Errorf("control: the big write left %d bytes, want %d", len(b), len(bigWrite))
	}
}
