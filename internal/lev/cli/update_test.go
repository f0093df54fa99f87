package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/update"
)

// TestUpdateCommand: lev update reports the releases answer of a loopback source, and a
// source past the 64 MiB cap fails with the cap's message; the built binary reads the
// source from LEV_UPDATE_URL.
func TestUpdateCommand(t *testing.T) {
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/huge" {
			w.Header().Set("Content-Length", fmt.Sprint(64<<20+1))
			w.WriteHeader(200)
			return
		}
		fmt.Fprint(w, `{"tag_name":"v1.4.0","html_url":"https://example.invalid/v1.4.0\u009b2J"}`)
	}))
	defer src.Close()
	for _, tc := range []struct {
		name, path, current string
		json                bool
		want, err           string
	}{
		{"update available", "/latest", "v1.3.9", false, "lev v1.3.9; latest release v1.4.0: an update is available at https://example.invalid/v1.4.0\\u009b2J\n", ""},
		{"up to date", "/latest", "v1.4.0", false, "lev v1.4.0; latest release v1.4.0: up to date\n", ""},
		{"json", "/latest", "v1.0.0", true, `"latest":"v1.4.0"`, ""},
		{"past the cap", "/huge", "v1.0.0", false, "", "update check: response body exceeded 64 MiB from 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runUpdate(context.Background(), &updateOptions{JSON: tc.json}, &update.Checker{URL: src.URL + tc.path, Current: tc.current}, &out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("err %v, out %q, want %q", err, out.String(), tc.want)
			}
		})
	}
	if testing.Short() {
		return
	}
	bin := buildLev(t)
	home := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LEV_HOME=" + filepath.Join(home, "lev"), update.URLEnv + "=" + src.URL + "/huge"}
	_, stderr, code := runLev(t, bin, env, "update")
	if code != 2 || !strings.Contains(stderr, "response body exceeded 64 MiB from 127.0.0.1") {
		t.Fatalf("lev update: exit %d\n%s", code, stderr)
	}
	env[3] = update.URLEnv + "=" + src.URL + "/latest"
	out, stderr, code := runLev(t, bin, env, "update")
	if code != 0 || !strings.Contains(out, "latest release v1.4.0") {
		t.Fatalf("lev update: exit %d\n%s%s", code, out, stderr)
	}
}
