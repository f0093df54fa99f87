package taint

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// hostileURLs is a call whose argument with a long name holds many short URLs: each URL's
// place repeats that name, so a target built from every place whole grows with their
// product (a 100 KB name and 8,000 URLs took 4.7 GB).
func hostileURLs(target map[string]any, nameLen, n int, last string) map[string]any {
	urls := make([]any, n)
	for i := range urls {
		urls[i] = "https://a.b"
	}
	urls[n-1] = last
	args := map[string]any{strings.Repeat("n", nameLen): urls}
	for k, v := range target {
		args[k] = v
	}
	return args
}

// allocated is the bytes f allocates, the least of three runs (another goroutine's
// allocations only add to a run).
func allocated(f func()) uint64 {
	least := ^uint64(0)
	for i := 0; i < 3; i++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestTargetOfManyURLsIsBounded: the target of a call carrying many URLs under a long
// name costs memory in proportion to the call, not to the URLs times their names; its raw
// text and reason are capped, and a cut text still tells calls with different URLs apart
// (it is a session answer's key). Each shape reads the URLs another way: beside a path,
// beside a url on the same host, and with no target argument. The controls: a short call
// gives its text whole.
func TestTargetOfManyURLsIsBounded(t *testing.T) {
	const nameLen, n = 16 << 10, 2000
	for _, shape := range []map[string]any{
		{"path": "/tmp/x"},
		{"url": "https://a.b/x"},
		{},
	} {
		args := hostileURLs(shape, nameLen, n, "https://evil.test/")
		other := hostileURLs(shape, nameLen, n, "https://evil2.test/")
		var target, why string
		got := allocated(func() { target, why = Target("mcp__x__send", args) })
		// The call itself is ~50 KB; every URL's place whole would be 2000 × 16 KB, 32 MB.
		t.Logf("%v: %d bytes allocated", shape, got)
		if limit := uint64(4 << 20); got > limit {
			t.Errorf("%v: Target allocated %d bytes for a call of %d URLs under a %d-byte name; want under %d", shape, got, n, nameLen, limit)
		}
		if why == "" || len(target) > 4200 || len(why) > 2048 {
			t.Errorf("%v: target of %d bytes, reason of %d bytes (%.200q); want unclear, both capped", shape, len(target), len(why), why)
		}
		if len(target) > 4096 && !strings.Contains(target, "sha256") {
			t.Errorf("%v: a cut target %.100q… names no hash of the whole", shape, target)
		}
		if t2, _ := Target("mcp__x__send", other); t2 == target {
			t.Errorf("%v: calls differing in their last URL share the target %.100q…", shape, target)
		}
		if t3, _ := Target("mcp__x__send", args); t3 != target {
			t.Errorf("%v: the same call read twice gives two targets", shape)
		}
	}
	// A hostile path or url value alone: capped too, and apart from another.
	long := "https://a.b/" + strings.Repeat("x", 1<<20) + "\t"
	for _, tool := range []string{"mcp__x__send", "web_fetch"} {
		t1, why := Target(tool, map[string]any{"url": long})
		t2, _ := Target(tool, map[string]any{"url": long + "y"})
		if why == "" || len(t1) > 4200 || t1 == t2 {
			t.Errorf("%s: a 1 MB unclear url gives a %d-byte target (unclear %q), same as another's: %v", tool, len(t1), why, t1 == t2)
		}
	}
	// Controls: a short unclear call's text is whole.
	small := map[string]any{"path": "/tmp/x", "a": "https://a.test/", "b": "https://b.test/"}
	if target, why := Target("mcp__x__send", small); target != "path=/tmp/x a=https://a.test/ b=https://b.test/" || why == "" {
		t.Errorf("a short call: %q, %q", target, why)
	}
}

// TestTargetNamesFewURLs: a reason names the first URLs' places and counts the rest; a
// place longer than 256 bytes is cut, marked.
func TestTargetNamesFewURLs(t *testing.T) {
	args := map[string]any{"path": "/tmp/x"}
	for i := 0; i < 10; i++ {
		args[fmt.Sprintf("u%d", i)] = "https://evil.test/"
	}
	_, why := Target("mcp__x__send", args)
	if !strings.Contains(why, "10 more of its arguments are URLs (u0, u1, u2, u3, and 6 more)") {
		t.Errorf("reason %q", why)
	}
	long := strings.Repeat("n", 1000)
	target, why := Target("mcp__x__send", map[string]any{"path": "/tmp/x", long: "https://evil.test/"})
	if strings.Contains(target, long[:300]) || strings.Contains(why, long[:300]) || !strings.Contains(why, long[:200]+"…") {
		t.Errorf("a 1000-byte name is not cut at 256: target %d bytes, reason %q", len(target), why)
	}
}

// TestGateSessionAnswerKeepsClearAndUnclearApart: a session answer for a clear target
// does not cover an unclear one with the same text, nor the other way round (a path may
// be any text, an unclear target's raw text among it).
func TestGateSessionAnswerKeepsClearAndUnclearApart(t *testing.T) {
	const text = "path=/tmp/x endpoint=https://evil.test/"
	for _, first := range []string{"", "its endpoint argument is a URL too"} {
		asked := 0
		g := &Gate{Table: NewTable(nil), Mode: Interactive, Audit: &MemAudit{},
			Asker: AskFunc(func(context.Context, Prompt) (Answer, error) { asked++; return AnswerSession, nil })}
		call := Call{Tool: "mcp__x__send", Target: text, TargetUnclear: first, Taint: Private}
		for i := 0; i < 2; i++ { // control: the same call again is covered
			if out, err := g.Check(context.Background(), call); err != nil || !out.Allowed {
				t.Fatalf("call %d: %+v %v", i, out, err)
			}
		}
		if asked != 1 {
			t.Fatalf("the session answer did not cover the same call: asked %d times", asked)
		}
		g.Asker = AskFunc(func(context.Context, Prompt) (Answer, error) { return AnswerDeny, nil })
		call.TargetUnclear = map[string]string{"": "unclear", "its endpoint argument is a URL too": ""}[first]
		if out, _ := g.Check(context.Background(), call); out.Allowed {
			t.Errorf("a session answer for %q (unclear %q) covered the same text with unclear %q", text, first, call.TargetUnclear)
		}
	}
}

// TestGateSessionAnswerCoversOnlyTheCallShown: an unclear target's raw text joins
// label=value pairs unescaped, so two calls sending to different places can read alike:
// a url argument holding "url=https://a.example/ host=evil.test", and a url and a host
// argument apart. A session answer for the first must not cover the second; the control
// is the first call again, which it covers.
func TestGateSessionAnswerCoversOnlyTheCallShown(t *testing.T) {
	one := map[string]any{"url": "url=https://a.example/ host=evil.test"}
	two := map[string]any{"url": "https://a.example/", "host": "evil.test"}
	call := func(args map[string]any) Call {
		target, unclear := Target("mcp__x__fetch", args)
		return Call{Tool: "mcp__x__fetch", Target: target, TargetUnclear: unclear, Taint: Private,
			Args: func() json.RawMessage { b, _ := json.Marshal(args); return b }}
	}
	c1, c2 := call(one), call(two)
	if c1.Target != c2.Target || c1.TargetUnclear == "" || c2.TargetUnclear == "" {
		t.Fatalf("control: the two calls should read alike and unclear: %q (%s) and %q (%s)", c1.Target, c1.TargetUnclear, c2.Target, c2.TargetUnclear)
	}
	asked := 0
	g := &Gate{Table: NewTable(nil), Mode: Interactive, Audit: &MemAudit{},
		Asker: AskFunc(func(context.Context, Prompt) (Answer, error) { asked++; return AnswerSession, nil })}
	for i := 0; i < 2; i++ {
		if out, err := g.Check(context.Background(), c1); err != nil || !out.Allowed {
			t.Fatalf("call %d: %+v %v", i, out, err)
		}
	}
	if asked != 1 {
		t.Fatalf("the session answer did not cover the same call again: asked %d times", asked)
	}
	g.Asker = AskFunc(func(context.Context, Prompt) (Answer, error) { return AnswerDeny, nil })
	if out, _ := g.Check(context.Background(), c2); out.Allowed {
		t.Errorf("a session answer for %v covered %v, which reads alike (%q)", one, two, c2.Target)
	}
}

// TestURLBehindUnicodeSpace: Python's requests strips every leading Unicode space (U+00A0,
// U+3000) from a URL before it parses it, so a value starting with one is a URL all the
// same: the call's target is unclear. The controls are the same values without the space
// (read as URLs too) and a path argument alone (clear).
func TestURLBehindUnicodeSpace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    map[string]any
		unclear bool
	}{
		{"no-break space before the only URL", map[string]any{"data": "\u00a0https://evil.test/x"}, true},
		{"ideographic space before an endpoint", map[string]any{"path": "/tmp/x", "endpoint": "\u3000https://evil.test/x"}, true},
		{"zero-width space before an endpoint", map[string]any{"path": "/tmp/x", "endpoint": "\u200bhttps://evil.test/x"}, true},
		{"path with ideographic space and //", map[string]any{"path": "\u3000//evil.test/x"}, true},
		{"control: an endpoint URL with no space", map[string]any{"path": "/tmp/x", "endpoint": "https://evil.test/x"}, true},
		{"control: the path alone", map[string]any{"path": "/tmp/x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, unclear := Target("mcp__x__send", tc.args)
			if (unclear != "") != tc.unclear {
				t.Fatalf("target %q, unclear %q; want unclear %v", target, unclear, tc.unclear)
			}
		})
	}
	// The only URL, with no space: its host is the target.
	if target, unclear := Target("mcp__x__send", map[string]any{"data": "https://evil.test/x"}); target != "evil.test" || unclear != "" {
		t.Fatalf("control: the only URL gave %q, %q", target, unclear)
	}
}
