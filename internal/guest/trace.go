package guest

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TraceEnv names the environment variable that turns call tracing on: LEVER_TRACE_GUEST=1
// writes one line per guest call to stderr, any other value appends them to that file.
// Guest round trips dominate bring-up time, so this is the first thing to read when a step
// is slow: which call, how long, beside which others.
const TraceEnv = "LEVER_TRACE_GUEST"

// Traced wraps a Runner and writes a line per call when it ends: its number, when it
// started and how long it took (from the first traced call), its identity and what it ran.
// Only argv's shape is written: an `env` prefix shows the names it sets, never their
// values, and stdin only its size, so a trace holds no ticket or key.
type Traced struct {
	Inner Runner
	Out   io.Writer
	n     atomic.Int64
	once  sync.Once
	t0    time.Time
	mu    sync.Mutex
}

// TraceFromEnv returns r wrapped in a Traced when TraceEnv is set, and r otherwise.
func TraceFromEnv(r Runner) Runner {
	v := os.Getenv(TraceEnv)
	if v == "" {
		return r
	}
	var out io.Writer = os.Stderr
	if v != "1" {
		f, err := os.OpenFile(v, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lever: %s: %v (tracing to stderr)\n", TraceEnv, err)
		} else {
			out = f
		}
	}
	return &Traced{Inner: r, Out: out}
}

// Run implements Runner.
func (t *Traced) Run(ctx context.Context, c Cmd) (Result, error) {
	t.once.Do(func() { t.t0 = time.Now() })
	n := t.n.Add(1)
	s := time.Now()
	res, err := t.Inner.Run(ctx, c)
	end := "rc=" + fmt.Sprint(res.ExitCode)
	if err != nil {
		end = "error"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.Out, "guest call %d: at +%.2fs took %.2fs as %s %s: %s (stdin %d B, stdout %d B)\n",
		n, s.Sub(t.t0).Seconds(), time.Since(s).Seconds(), c.As, end, ArgvShape(c.Argv), len(c.Stdin), len(res.Stdout))
	return res, err
}

// TraceCall is one line Traced wrote, read back: the call's number, when it started (from
// the first traced call) and how long it took, and whether the guest answered (an exit
// status, of any value) or the call failed (no answer).
type TraceCall struct {
	N        int
	At, Took time.Duration
	Answered bool
}

var traceLine = regexp.MustCompile(`(?m)^guest call (\d+): at \+([0-9.]+)s took ([0-9.]+)s as \S+ (rc=-?\d+|error): `)

// ParseTrace reads the lines Traced wrote, in the order written (the order calls ended);
// other lines are skipped. Read beside the writer, so the two keep one format.
func ParseTrace(text string) []TraceCall {
	var calls []TraceCall
	for _, m := range traceLine.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		at, _ := strconv.ParseFloat(m[2], 64)
		took, _ := strconv.ParseFloat(m[3], 64)
		calls = append(calls, TraceCall{N: n, At: seconds(at), Took: seconds(took), Answered: m[4] != "error"})
	}
	return calls
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// ArgvShape is argv for a trace: the values an `env` prefix sets are left out (they may
// carry secrets), and long words are cut.
func ArgvShape(argv []string) string {
	var w []string
	inEnv, optArg := false, false
	for i, a := range argv {
		switch {
		case i == 0 && a == "env":
			inEnv = true
			w = append(w, a)
			continue
		case inEnv && optArg:
			// the name after -u, or the dir after -C: not a value set
			optArg = false
			w = append(w, a)
			continue
		case inEnv && strings.HasPrefix(a, "-"):
			// env's own options (-i, -u NAME, --unset=NAME): the prefix goes on
			optArg = a == "-u" || a == "--unset" || a == "-C" || a == "--chdir"
			w = append(w, a)
			continue
		case inEnv && strings.Contains(a, "="):
			w = append(w, a[:strings.Index(a, "=")+1]+"…")
			continue
		}
		inEnv = false
		if len(a) > 48 {
			a = a[:48] + "…"
		}
		w = append(w, a)
	}
	return strings.Join(w, " ")
}
