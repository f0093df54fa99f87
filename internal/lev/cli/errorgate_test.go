package cli

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/daemon"
)

// TestRunErrorIsGated (issue 27, item 4): the text a run ends with is output. The built
// lev serve, in the jail's environment, runs an agent that reads a secret through its
// grant and then asks read_file for a path under a [read_paths] entry the config does not
// grant, with the secret spelled in the path's name. The run stops refused; its error
// would name that path. Attack row: the error served by `lev result --json`, `lev ps
// --json` and GET /api/agents/{id} (the record) must not hold the secret, must say it was
// withheld and keep the refusal's code, and the run's label is private; the withheld text
// (runs/<id>/error.txt) does hold it, proving the name reached the message. Control row:
// an agent with no grant reads a public file and makes the same refused read naming what
// it read; its error is served whole (the marker is in all three), labelled internal.
func TestRunErrorIsGated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const secret = "SECRET-lvtsbx-e7r0"
	const marker = "public-marker-5150"
	bin := buildLev(t)
	j := newJailEnv(t)
	mustWrite(t, filepath.Join(j.root, "secret", "key.txt"), secret)
	os.MkdirAll(filepath.Join(j.root, "vault"), 0o755)
	mustWrite(t, filepath.Join(j.wd, "readme.txt"), marker)
	mustWrite(t, filepath.Join(j.runLever, "config.toml"), "[agent_read_paths.leaky]\nallow = [\"~/secret\"]\n")
	for _, a := range []struct{ name, paths string }{{"leaky", `"~/secret", "~/vault"`}, {"tidy", `"~/vault"`}} {
		mustWrite(t, filepath.Join(j.runLever, "agents", a.name+".toml"), "name = \""+a.name+"\"\nversion = \"1\"\n[read_paths]\nallow = ["+a.paths+
			"]\n[stages.s]\nprompt = \"p\"\ntools = [\"read_file\", \"submit_output\"]\n")
	}
	serveWith(t, bin, j.env, "unix:"+j.sock)
	client, err := daemon.NewClient("unix:"+j.sock, jailToken)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, agent, read, payload, label string
		withheld                          bool
	}{
		{"private run: the error is withheld", "leaky", filepath.Join(j.root, "secret", "key.txt"), secret, "private", true},
		{"control: internal run: the error is served whole", "tidy", "readme.txt", marker, "internal", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustWrite(t, j.script, `
[[rule]]
turn = 1
[[rule.call]]
tool = "read_file"
args = '{"path": "`+tc.read+`"}'

[[rule]]
turn = 2
[[rule.call]]
tool = "read_file"
args = '{"path": "`+filepath.Join(j.root, "vault")+`/{{last}}.txt"}'
`)
			_, errs, _ := runLevIn(t, bin, j.wd, j.env, "run", tc.agent)
			id := regexpRunID(t, errs)
			rec, err := client.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != "refused" || rec.Refusal == nil || rec.Refusal.Code != "not-granted" {
				t.Fatalf("run %s: %s %+v %q, want refused not-granted", id, rec.Status, rec.Refusal, rec.Error)
			}
			out, _, _ := runLevIn(t, bin, j.wd, j.env, "result", id, "--json")
			var res daemon.Result
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("lev result --json: %q: %v", out, err)
			}
			out, _, code := runLevIn(t, bin, j.wd, j.env, "ps", "--json")
			var rows []psRow
			if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
				t.Fatalf("lev ps --json: %d %q", code, out)
			}
			var ps *psRow
			for i := range rows {
				if rows[i].ID == id {
					ps = &rows[i]
				}
			}
			if ps == nil {
				t.Fatalf("lev ps --json lacks %s: %q", id, out)
			}
			api := rawResult(t, j.sock, id)
			served := map[string]string{"lev result --json": res.Error, "lev ps --json": ps.Error,
				"GET /api/agents/{id}": rec.Error + " " + rec.Refusal.Msg, "GET /api/agents/{id}/result": api.Error}
			for where, text := range served {
				if strings.Contains(text, tc.payload) == tc.withheld {
					t.Errorf("%s: error %q; holds %q = %v, want %v", where, text, tc.payload, !tc.withheld, !tc.withheld)
				}
				if tc.withheld && !strings.Contains(text, "withheld") {
					t.Errorf("%s: error %q does not say it was withheld", where, text)
				}
				// Either way the operator learns what to grant and how to go on.
				for _, w := range []string{"~/vault", "add to your config.toml", "lev resume " + id} {
					if !strings.Contains(text, w) {
						t.Errorf("%s: error %q lacks %q", where, text, w)
					}
				}
			}
			if res.Label != tc.label || ps.Label != tc.label || rec.Label != tc.label || api.Label != tc.label {
				t.Errorf("labels: lev result %q, ps %q, record %q, /result %q; want %q", res.Label, ps.Label, rec.Label, api.Label, tc.label)
			}
			// The gate decided the error text and audited it as the submit_output it
			// stands for.
			audit, err := os.ReadFile(filepath.Join(j.levHome, "runs", id, "stages", "0", "taint_audit.json"))
			wantSrc := `"decision_source": "AutoBlock"`
			if !tc.withheld {
				wantSrc = `"decision_source": "WithinClearance"`
			}
			if err != nil || !strings.Contains(string(audit), `"call_id": "run-error-0"`) || !strings.Contains(string(audit), wantSrc) {
				t.Fatalf("the run error's gate decision (%s) is not audited (%v):\n%s", wantSrc, err, audit)
			}
			kept, err := os.ReadFile(filepath.Join(j.levHome, "runs", id, "error.txt"))
			if tc.withheld && (err != nil || !strings.Contains(string(kept), tc.payload)) {
				t.Fatalf("the withheld message (%v) lacks the path the model chose: %q", err, kept)
			}
			if !tc.withheld && err == nil {
				t.Fatalf("a served error was also withheld: %q", kept)
			}
		})
	}
}

// rawResult is GET /api/agents/{id}/result over the daemon's unix socket, body decoded
// whatever the status (a run that did not complete is a 409 with the same body).
func rawResult(t *testing.T, sock, id string) daemon.Result {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest("GET", "http://lev/api/agents/"+id+"/result", nil)
	req.Header.Set("Authorization", "Bearer "+jailToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res daemon.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || res.ID != id {
		t.Fatalf("GET /api/agents/%s/result: %d %+v %v", id, resp.StatusCode, res, err)
	}
	return res
}
