package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestReadPathStatusFourCommands: the spec's four commands beyond lev validate (lev run,
// lev resume, lev ps, lev logs) each say which declared read path is not granted, through
// the built binary and a real daemon. The agent declares one granted and one ungranted
// entry and reads through the ungranted one, so the run is refused; the positive control
// is the granted entry, reported granted by the same commands (and not warned about).
func TestReadPathStatusFourCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	granted, missing := filepath.Join(root, "docs"), filepath.Join(root, "private")
	mustWrite(t, filepath.Join(missing, "x.txt"), "PRIVATE")
	mustWrite(t, filepath.Join(granted, "y.txt"), "DOCS")
	wd := filepath.Join(root, "wd")
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	lh := filepath.Join(root, "lev")
	script := filepath.Join(root, "script.toml")
	mustWrite(t, script, "[[rule]]\nturn = 1\n[[rule.call]]\ntool = \"read_file\"\nargs = '{\"path\": \""+filepath.Join(missing, "x.txt")+"\"}'\n")
	mustWrite(t, filepath.Join(lh, "agents", "cto.toml"), "name = \"cto\"\nversion = \"1\"\n[read_paths]\nallow = ["+
		strconv.Quote(granted)+", "+strconv.Quote(missing)+"]\n[stages.s]\ntools = [\"read_file\", \"submit_output\"]\n")
	mustWrite(t, filepath.Join(lh, "config.toml"), "[daemon]\nlisten = \""+freeAddr(t)+"\"\n[provider]\nkind = \"scripted\"\nscript = "+
		strconv.Quote(script)+"\n[agent_read_paths.cto]\nallow = ["+strconv.Quote(granted)+"]\n")
	t.Cleanup(func() { stopDaemon(filepath.Join(lh, "daemon.pid")) })
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + lh}

	warn := "lev: WARN your config does not grant " + missing + ": reads matching them will be refused [read-paths-not-granted]"
	fix := `add to your config.toml: [agent_read_paths.cto] allow = ["` + missing + `"]`
	_, stderr, code := runLev(t, bin, env, "run", "cto", "--workdir", wd, "--headless")
	if code != 1 || !strings.Contains(stderr, warn) || !strings.Contains(stderr, fix) || strings.Contains(stderr, "grant "+granted) {
		t.Fatalf("lev run: exit %d\n%s", code, stderr)
	}
	m := regexp.MustCompile(`run (r-[0-9a-f-]+) of cto`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no run id in %s", stderr)
	}
	id := m[1]

	_, stderr, code = runLev(t, bin, env, "resume", id, "--headless")
	if code != 1 || !strings.Contains(stderr, warn) || !strings.Contains(stderr, fix) {
		t.Fatalf("lev resume: exit %d\n%s", code, stderr)
	}

	out, stderr, code := runLev(t, bin, env, "ps")
	if code != 0 || !strings.Contains(out, "READ PATHS") || !strings.Contains(out, "1/2 granted (1 NOT GRANTED)") {
		t.Fatalf("lev ps: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = runLev(t, bin, env, "ps", "--json")
	var rows []psRow
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 1 {
		t.Fatalf("lev ps --json: exit %d, %v\n%s", code, err, out)
	}
	got := map[string]bool{}
	for _, s := range rows[0].ReadPaths {
		got[s.Entry] = s.Granted
	}
	if g, ok := got[granted]; !ok || !g || got[missing] || len(got) != 2 {
		t.Fatalf("lev ps --json read_paths: %+v", rows[0].ReadPaths)
	}

	out, stderr, code = runLev(t, bin, env, "logs", id)
	if code != 0 || !strings.Contains(stderr, warn) || !strings.Contains(stderr, fix) || !strings.Contains(out, "refused") {
		t.Fatalf("lev logs: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
}
