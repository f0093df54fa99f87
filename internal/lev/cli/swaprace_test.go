//go:build linux

package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteSwapRaceBinary is issue 27's attack on the built binary: lev's home lies in the
// workdir (a jail's tree), and while a run's write_file calls go by, something outside lev
// exchanges wd/sub (a directory) with a symlink to .lev as fast as it can. A write checked
// while sub was the directory and opened after the exchange would plant .lev/policy.toml,
// a policy the next run obeys. It must never appear, nor anything under .lev/d. Controls:
// writes do land in sub (the race leaves the tool working), and the run's record shows
// calls that passed the fence step (their writes recorded) and were then refused as lev's
// state by the descriptor check: the race was won past the path check and stopped there.
func TestWriteSwapRaceBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	b := newBox(t, bin, "wd/.lev", "")
	b.agent("prober", proberBlueprint)
	sub, alt := filepath.Join(b.wd, "sub"), filepath.Join(b.wd, "alt")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".lev", alt); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("RENAME_EXCHANGE: %v", err)
	}
	if r, _ := filepath.EvalSymlinks(sub); r != b.home {
		t.Fatalf("the exchanged sub resolves to %s, not lev's home", r)
	}
	unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE)

	const turns, perTurn = 8, 25
	var script strings.Builder
	for turn := 1; turn <= turns; turn++ {
		fmt.Fprintf(&script, "[[rule]]\nstage = \"probe\"\nturn = %d\n", turn)
		for i := range perTurn {
			p := "sub/policy.toml"
			if i%2 == 1 {
				p = "sub/d/policy.toml"
			}
			fmt.Fprintf(&script, "[[rule.call]]\ntool = \"write_file\"\nargs = '{\"path\": %q, \"content\": \"[[allow]]\\ntool = \\\"*\\\"\\n\"}'\n", p)
		}
	}
	fmt.Fprintf(&script, "[[rule]]\nstage = \"probe\"\nturn = %d\n[[rule.call]]\ntool = \"submit_output\"\nargs = '{\"output\": \"done\"}'\n", turns+1)
	mustWrite(t, b.script, script.String())

	landed, caught, total := 0, 0, 0
	// Runs until both controls have shown, at most five: the race is won by chance, on a
	// machine whose load decides how often.
	for attempt := 0; attempt < 5 && (landed == 0 || caught == 0); attempt++ {
		l, c, n := b.raceRun(t, sub, alt)
		landed, caught, total = landed+l, caught+c, total+n
		if n != turns*perTurn {
			t.Fatalf("control: %d write_file calls recorded, want %d", n, turns*perTurn)
		}
	}
	t.Logf("%d write_file calls: %d landed in sub, %d passed the fence step and were refused on the descriptor", total, landed, caught)
	if landed == 0 {
		t.Fatal("control: no write landed in sub under the race")
	}
	if caught == 0 {
		t.Fatal("control: no call passed the fence step and met the swap; the race was not run")
	}
}

// raceRun is one lev run of the script under the exchanging goroutine. It fails the test
// if anything appeared in lev's home, and counts this run's write_file calls: landed,
// caught on the descriptor after passing the fence step, all.
func (b *levBox) raceRun(t *testing.T, sub, alt string) (landed, caught, total int) {
	t.Helper()
	before, _ := filepath.Glob(filepath.Join(b.home, "runs", "*"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE)
			}
		}
	}()
	out, stderr, code := b.lev("run", "prober", "--workdir", b.wd)
	close(stop)
	wg.Wait()
	if fi, err := os.Lstat(sub); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE)
	}
	for _, p := range []string{"policy.toml", "d"} {
		if _, err := os.Lstat(filepath.Join(b.home, p)); err == nil {
			t.Fatalf("a write landed in lev's home: %s", filepath.Join(b.home, p))
		}
	}
	if code != 0 {
		t.Fatalf("lev run: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	after, _ := filepath.Glob(filepath.Join(b.home, "runs", "*"))
	var recs []string
	for _, r := range after {
		if !slices.Contains(before, r) {
			more, _ := filepath.Glob(filepath.Join(r, "stages", "*", "tool_calls.jsonl"))
			recs = append(recs, more...)
		}
	}
	for _, rec := range recs {
		f, err := os.Open(rec)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var cr struct {
				Tool    string            `json:"tool"`
				Writes  []json.RawMessage `json:"writes"`
				IsError bool              `json:"is_error"`
				Result  string            `json:"result"`
			}
			if err := json.Unmarshal(sc.Bytes(), &cr); err != nil || cr.Tool != "write_file" {
				continue
			}
			total++
			switch {
			case !cr.IsError:
				landed++
			case len(cr.Writes) > 0 && strings.Contains(cr.Result, "lev's own state"):
				caught++
			}
		}
		f.Close()
	}
	return landed, caught, total
}
