// Package browser is headless Chromium for the dashboard's browser tests (internal/dashboard
// over recorded run files, internal/bringup against a real jail): one fresh profile per
// test, and what its pages report — console errors, uncaught exceptions, failed console
// asserts, browser log errors (where CSP violations land) and JavaScript dialogs (an
// alert() from a payload) — kept for the test to check.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Browser is one headless Chromium.
type Browser struct {
	ctx context.Context

	mu       sync.Mutex
	problems []string
	dialogs  []string
}

// path finds Debian's chromium; without it the test is skipped, or fails under CI=true
// (CI installs the package, so a missing browser there is a broken install).
func path(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (CI installs Debian's chromium package)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// New starts Chromium on about:blank; it is stopped when the test ends.
func New(t *testing.T) *Browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root, where Chromium's sandbox will not start
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	b := &Browser{}
	ctx, cancel2 := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			b.mu.Lock()
			b.dialogs = append(b.dialogs, e.Message)
			b.mu.Unlock()
		}
	}))
	t.Cleanup(cancel2)
	b.ctx = ctx
	// The first Run starts the browser and lives as long as ctx: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() || m.Type == "assert" {
				b.mu.Lock()
				b.problems = append(b.problems, m.String()+" at "+m.URL)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// Context is the browser's context, for a step the helpers do not cover.
func (b *Browser) Context() context.Context { return b.ctx }

// Do runs steps, failing the test on an error or after 60 s.
func (b *Browser) Do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// Eval evaluates expr in the page.
func Eval[T any](t *testing.T, b *Browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// Text is the text of the first element sel matches ("" when none does).
func (b *Browser) Text(t *testing.T, sel string) string {
	t.Helper()
	return Eval[string](t, b, fmt.Sprintf(`(function(){const e=document.querySelector(%q);return e?e.textContent:""})()`, sel))
}

// WaitText polls until sel's text contains want, and returns how long it took.
func (b *Browser) WaitText(t *testing.T, sel, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var got string
	for time.Since(start) < within {
		if got = b.Text(t, sel); strings.Contains(got, want) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never showed %q within %s (last: %q)", sel, want, within, got)
	return 0
}

// TakeProblems returns what the pages reported so far (not dialogs) and forgets it: a
// test that provoked an error on purpose takes it before Clean.
func (b *Browser) TakeProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// Clean fails the test with whatever the pages reported and any dialog they opened.
func (b *Browser) Clean(t *testing.T) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // the last page's messages on their way
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("the page reported: %s", p)
	}
	for _, d := range b.dialogs {
		t.Errorf("a payload opened a dialog: %q", d)
	}
}
