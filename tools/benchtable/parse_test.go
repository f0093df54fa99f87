package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/lever-jail/lever/internal/egress
cpu: Oxide Virtual Turin-like Processor
BenchmarkRenderVerify/ports=1-2         	      20	     64020 ns/op	        17.00 rules	   10192 B/op	     102 allocs/op
BenchmarkRenderVerify/ports=1000/drift-2   	      20	  18031112 ns/op
PASS
ok  	github.com/lever-jail/lever/internal/egress	0.525s
pkg: github.com/lever-jail/lever/internal/guest
BenchmarkBringUpEgress/nft/unchanged-2         	      20	 127821681 ns/op	         1.000 guest-calls/op	         0 restore-commits/op
BenchmarkTop 	 5	 2000000000 ns/op
--- FAIL: BenchmarkBroken
FAIL	github.com/lever-jail/lever/internal/other	1.0s
`

func TestParse(t *testing.T) {
	r := Parse(strings.NewReader(sample))
	if d := cmp.Diff([]string{"github.com/lever-jail/lever/internal/egress", "github.com/lever-jail/lever/internal/guest"}, r.Packages); d != "" {
		t.Fatal(d)
	}
	g := r.ByPkg["github.com/lever-jail/lever/internal/guest"][0]
	if g.Name != "BringUpEgress/nft/unchanged" || g.Group() != "BringUpEgress" || g.Sub() != "nft/unchanged" || g.Metrics["guest-calls/op"] != 1 || g.Iters != 20 {
		t.Errorf("%+v", g)
	}
	if d := cmp.Diff([]string{"github.com/lever-jail/lever/internal/other"}, r.Failed); d != "" {
		t.Error(d)
	}
	doc := Render(r, MachineInfo{CPU: "x", Cores: 2, Kernel: "6.1", OS: "Debian", Memory: "24 GB", Load: "1 1 1", Go: "go1.26"}, time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC), "e2e")
	for _, want := range []string{
		"- Date: 2026-11-29 13:00 UTC",
		"- Machine: Oxide Virtual Turin-like Processor, 2 cores, 24 GB memory",
		"### BenchmarkRenderVerify\n\n| case | iterations | time/op | B/op | allocs/op | rules |",
		"| ports=1 | 20 | 64.02µs | 10192 | 102 | 17 |",
		"| ports=1000/drift | 20 | 18.031ms | - | - | - |",
		"| nft/unchanged | 20 | 127.822ms | - | - | 1 | 0 |",
		"| (all) | 5 | 2s | - | - |",
		"FAILED packages",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q:\n%s", want, doc)
		}
	}
}

func TestMergeTags(t *testing.T) {
	for _, tc := range []struct{ goflags, want string }{
		{"", "e2e"},
		{"-tags=remote,btrfs_noversion", "e2e,remote,btrfs_noversion"},
		{"-mod=mod -tags remote", "e2e,remote"},
		{"-trimpath", "e2e"},
	} {
		if got := MergeTags("e2e", tc.goflags); got != tc.want {
			t.Errorf("MergeTags(%q) = %q, want %q", tc.goflags, got, tc.want)
		}
	}
}
