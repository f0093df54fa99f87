//go:build e2e

package bringup_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
)

// BenchmarkLeverRun measures the daily loop's overhead on a netns jail that is up: an empty
// scripted run through `lever run` (host command to result: exec into the lev container,
// spawn, one model turn through the broker to a stand-in that answers at once, the result
// back), against the baseline of the same host command path with no run in it
// (`lever shell -- true`: attach, exec, exit code), both in the same loop; and the event
// latency: from the moment lev stamps a tool call's event in the jail to the moment its
// line is read on the host (one clock: the netns guest is this host).
func BenchmarkLeverRun(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireTool(b, "podman")
	r := make([]byte, 3)
	rand.Read(r)
	sfx := hex.EncodeToString(r)
	dir := b.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(tree, 0o777)
	os.Chmod(tree, 0o777)
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-bench-"+sfx+"\n"), 0o600)
	model := &testutil.StandIn{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	settings := filepath.Join(dir, "lev-settings")
	os.MkdirAll(filepath.Join(settings, "agents"), 0o755)
	os.WriteFile(filepath.Join(settings, "config.toml"), []byte("[provider]\nmodel = \"stand-in\"\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "empty.toml"), []byte("name = \"empty\"\nversion = \"1\"\n[stages.s]\ntools = [\"submit_output\"]\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "one.toml"), []byte("name = \"one\"\nversion = \"1\"\n[stages.s]\ntools = [\"shell\", \"submit_output\"]\n"), 0o644)
	jp, ap := freePort(&testing.T{}), freePort(&testing.T{})
	cfgPath := filepath.Join(dir, "lever.yaml")
	y := testutil.NetnsYAML("r"+sfx, keyFile, srv.URL, jp, ap)
	y.ManagerPorts = []int{jp}
	y.Lev = testutil.YAMLLev{Config: filepath.Join(settings, "config.toml"), Agents: filepath.Join(settings, "agents")}
	y.Write(b, cfgPath)
	b.Setenv("LEVER_DEV_NETNS", "1")
	b.Setenv("LEVER_NETNS_PREFIX", "lvtb")
	b.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	b.Setenv("LEVER_LEV_BINARY", levBinary(&testing.T{}))
	b.Setenv(asLever, "1")
	cfg, err := config.Load(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	be, err := backend.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		lever(&testing.T{}, "destroy", "-c", cfgPath)
		bringup.TeardownInPlace(context.Background(), be)
	}()
	if out, code := lever(&testing.T{}, "up", "-c", cfgPath); code != 0 {
		b.Fatalf("up: exit %d\n%s", code, out)
	}
	hostCmd := func(args ...string) (time.Duration, string) {
		s := time.Now()
		code, stdout, errs := leverIO(args...)
		d := time.Since(s)
		if code != 0 {
			b.Fatalf("lever %v: exit %d\n%s%s", args, code, stdout, errs)
		}
		return d, stdout
	}

	b.Run("empty-run-vs-exec", func(b *testing.B) {
		model.Steps = []testutil.Step{{Tool: "submit_output", Args: map[string]string{"output": "ok"}}}
		var run, execD time.Duration
		for i := 0; i < b.N; i++ {
			d, out := hostCmd("run", "-c", cfgPath, "empty")
			if !strings.Contains(out, "ok") {
				b.Fatalf("lever run: %q", out)
			}
			run += d
			d, _ = hostCmd("shell", "-c", cfgPath, "--", "true")
			execD += d
		}
		b.ReportMetric(float64(run.Milliseconds())/float64(b.N), "run-ms/op")
		b.ReportMetric(float64(execD.Milliseconds())/float64(b.N), "exec-baseline-ms/op")
		b.ReportMetric(float64(run)/float64(execD), "run/exec-ratio")
	})

	b.Run("event-latency", func(b *testing.B) {
		model.Steps = []testutil.Step{
			{Tool: "shell", Args: map[string]string{"command": "true"}},
			{Tool: "submit_output", Args: map[string]string{"output": "ok"}},
		}
		stamp := regexp.MustCompile(`lev: (\d\d:\d\d:\d\d\.\d\d\d) #\d+ tool shell \{`)
		var lat []time.Duration
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(os.Args[0], "run", "-c", cfgPath, "--allow", "shell", "one")
			cmd.Env = append(os.Environ(), asLever+"=1")
			pipe, _ := cmd.StderrPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				now := time.Now().UTC()
				if m := stamp.FindStringSubmatch(sc.Text()); m != nil {
					at, err := time.Parse("15:04:05.000", m[1])
					if err == nil {
						at = time.Date(now.Year(), now.Month(), now.Day(), at.Hour(), at.Minute(), at.Second(), at.Nanosecond(), time.UTC)
						lat = append(lat, now.Sub(at))
					}
				}
			}
			if err := cmd.Wait(); err != nil {
				b.Fatalf("lever run one: %v", err)
			}
		}
		if len(lat) != b.N {
			b.Fatalf("saw %d tool-call lines in %d runs", len(lat), b.N)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "event-latency-p50-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "event-latency-max-ms")
	})
}
