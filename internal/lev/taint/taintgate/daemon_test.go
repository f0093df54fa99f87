package taintgate

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestNobodyToAskThroughTheDaemon: the "nobody to ask" rows of docs/lev-security.md ("The gate"), measured
// against a real daemon on loopback: a granted (Private) read flowing into submit_output.
// Headless, the result is withheld and an AutoBlock recorded; with --yolo, the result
// (secret included) is served by GET /api/agents/{id}/result and the audit holds the
// AutoBlock beside the YoloAutoApprove that waived it.
func TestNobodyToAskThroughTheDaemon(t *testing.T) {
	w := newWorld(t)
	scr := filepath.Join(w.root, "script.toml")
	os.WriteFile(scr, []byte(strings.ReplaceAll(script("one", "submit_output", `{"output": "{{last}}"}`), "HOME", w.home)), 0o644)
	cfgFile := filepath.Join(w.levHome, "config.toml")
	os.WriteFile(cfgFile, []byte("[provider]\nkind = \"scripted\"\nscript = "+q(scr)+"\n[agent_read_paths.exfil]\nallow = [\"~/secret\"]\n[security]\npolicy_file = "+q(filepath.Join(w.root, "none.toml"))+"\n"), 0o644)
	os.WriteFile(filepath.Join(w.levHome, "agents", "exfil.toml"), []byte("name = \"exfil\"\nversion = \"1.0.0\"\n[read_paths]\nallow = [\"~/secret\"]\n[stages.one]\nprompt = \"p\"\ntools = [\"read_file\", \"submit_output\"]\n"), 0o644)
	watcher, err := levconfig.NewWatcher(cfgFile, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(w.levHome, "runs")}, AgentsDir: filepath.Join(w.levHome, "agents"),
		Config: watcher.Current, Home: w.home, Log: t.Logf, NewGate: Factory, NewExecutor: hostExec}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const token = "lvtsbx-token-0123456789abcdef"
	srv := &daemon.Server{Engine: eng, Watcher: watcher, Token: token, Log: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	client := &daemon.Client{Base: "http://" + ln.Addr().String(), Token: token}

	for _, tc := range []struct {
		yolo     bool
		sources  []taint.Source
		leaks    bool
		complete bool
	}{
		{false, []taint.Source{taint.SourceAutoBlock}, false, false},
		{true, []taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}, true, true},
	} {
		rec, err := client.Spawn(ctx, runner.Spec{Agent: "exfil", Workdir: w.wd, Yolo: tc.yolo})
		if err != nil {
			t.Fatal(err)
		}
		rec, err = client.Wait(ctx, rec.ID, 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		res, err := client.Result(ctx, rec.ID)
		var out string
		if res != nil {
			out = string(res.Output)
		}
		if tc.leaks && err != nil {
			t.Fatalf("yolo: result: %v (run %s: %s)", err, rec.Status, rec.Error)
		}
		if !tc.leaks && err == nil {
			t.Errorf("headless: a result was served: %s", out)
		}
		if got := strings.Contains(out+string(rec.Result), secret); got != tc.leaks {
			t.Errorf("yolo=%v: result %s; secret published = %v, want %v", tc.yolo, out, got, tc.leaks)
		}
		recs, err := taint.ReadAudit(taint.AuditPath(eng.Store.RunDir(rec.ID), 0))
		if err != nil {
			t.Fatal(err)
		}
		checkAudit(t, recs, want{tool: "submit_output", sources: tc.sources, taint: taint.Private})
		if !tc.yolo {
			// The plain "done" that followed the blocked submit_output was blocked too.
			if n := len(recs) - len(calls(recs)); n == 0 {
				t.Errorf("headless: the final answer was not gated: %+v", recs)
			}
		}
	}
}
