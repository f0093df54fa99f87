package orbstack

import (
	"context"
	"testing"
)

// recordedExec answers orb calls from a table, in process, and counts them.
type recordedExec struct {
	out   map[string]string
	calls int
}

func (r *recordedExec) Run(_ context.Context, argv []string, _ []byte) ([]byte, []byte, int, error) {
	r.calls++
	key := ""
	for i, a := range argv {
		if i > 0 {
			key += " "
		}
		key += a
	}
	return []byte(r.out[key]), nil, 0, nil
}

// BenchmarkEnsureUp counts orb invocations per bring-up of an existing machine: the
// running case is one `orb list`, the stopped case adds `orb start`.
func BenchmarkEnsureUp(b *testing.B) {
	for _, state := range []string{"running", "stopped"} {
		b.Run(state, func(b *testing.B) {
			x := &recordedExec{out: map[string]string{
				"list --format json": `[{"name":"lever-demo","state":"` + state + `","config":{"isolated":true}}]`,
			}}
			be, err := New(Options{Machine: "lever-demo", Tree: "/Users/dev/src/demo", Exec: x, Arch: "amd64"})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := be.EnsureUp(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(x.calls)/float64(b.N), "orb-calls/op")
		})
	}
}
