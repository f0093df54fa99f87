package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// BenchmarkGate is the gate's own cost for one outbound call above clearance: policy
// evaluation over N allowlist entries and N expression rules (none matching, the worst
// case), with the audit in memory or on disk (one fsynced rewrite per record).
func BenchmarkGate(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		var src strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&src, "[[allow]]\ntool = \"http_post\"\ntarget = \"*.h%d.example.com\"\nmax_sensitivity = \"private\"\n", i)
			fmt.Fprintf(&src, "[[rule]]\nwhen = 'tool == \"shell\" && target contains \"x%d\"'\naction = \"deny\"\n", i)
		}
		p, err := Parse([]byte(src.String()), "bench.toml")
		if err != nil {
			b.Fatal(err)
		}
		for _, audit := range []string{"mem", "file"} {
			b.Run(fmt.Sprintf("rules=%d/audit=%s", n, audit), func(b *testing.B) {
				var a taint.Auditor = &taint.MemAudit{}
				if audit == "file" {
					a = taint.NewFileAudit(b.TempDir())
				}
				g := &taint.Gate{Table: p.Table(), Policy: p, Mode: taint.Headless, Audit: a}
				call := taint.Call{Tool: "http_post", Target: "api.other.test", Taint: taint.Private}
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if i%64 == 0 && audit == "file" {
						// Keep the per-stage file short, as a real stage's is.
						b.StopTimer()
						a = taint.NewFileAudit(b.TempDir())
						g.Audit = a
						b.StartTimer()
					}
					call.Stage = 0
					if out, err := g.Check(context.Background(), call); err != nil || out.Allowed {
						b.Fatal(out, err)
					}
				}
			})
		}
	}
}
