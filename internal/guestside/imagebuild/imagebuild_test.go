package imagebuild

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Requests the helper must refuse before it reads or builds anything.
func TestServeRefusesBadRequests(t *testing.T) {
	cases := []struct {
		name string
		body string
		want string
	}{
		{"not JSON", "lev", "reading the image request"},
		{"unknown field", `{"uid":1,"recursive":true}`, `unknown field "recursive"`},
		{"workbench without paths", `{"uid":1,"bench_dir":"/var/lib/lever/x/workbench/abc","root":"/"}`, "a workbench needs a root and paths"},
		{"workbench without a root", `{"uid":1,"bench_dir":"/var/lib/lever/x/workbench/abc","paths":["usr"]}`, "a workbench needs a root and paths"},
		{"workbench with a relative root", `{"uid":1,"bench_dir":"/var/lib/lever/x/workbench/abc","root":"usr","paths":["bin"]}`, "must be clean absolute paths"},
		{"workbench dir that climbs", `{"uid":1,"bench_dir":"/var/lib/lever/../../etc","root":"/","paths":["bin"]}`, "must be clean absolute paths"},
		{"lev without a ref", `{"uid":1,"lev":true,"arch":"amd64"}`, "the lev image needs its ref"},
		{"nothing asked", `{"uid":1}`, "asks for no image"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Serve(strings.NewReader(tc.body), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("answered %q to a refused request", out.String())
			}
		})
	}
}

// The lev image is built from the helper's own executable: a ref that does not match
// what that builds means the helper is not the lev lever computed the tag from, and
// nothing is loaded. (The test binary stands in for lev: a static Go executable.)
func TestServeRefusesAnotherLev(t *testing.T) {
	var out bytes.Buffer
	sock := filepath.Join(t.TempDir(), "podman.sock")
	err := Serve(strings.NewReader(`{"uid":`+strconv.Itoa(os.Geteuid())+`,"socket":"`+sock+`","lev":true,"arch":"`+runtime.GOARCH+`","lev_ref":"localhost/lever/lev:000000000000"}`), &out)
	if err == nil || !strings.Contains(err.Error(), "but lever expects localhost/lever/lev:000000000000") {
		t.Fatalf("err %v", err)
	}
}

// load talks podman's image-load endpoint: the names on success, podman's own message
// on a refusal, and a clear error when nothing listens.
func TestLoad(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v4.0.0/libpod/images/load" {
			http.Error(w, "wrong endpoint "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body := new(bytes.Buffer)
		body.ReadFrom(r.Body)
		got = body.Bytes()
		if bytes.Equal(got, []byte("bad archive")) {
			w.WriteHeader(http.StatusInternalServerError)
			json.NewEncoder(w).Encode(map[string]any{"cause": "x", "message": "payload does not match any of the supported image formats", "response": 500})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"Names": []string{"localhost/lever/lev:abc"}})
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	names, err := load(sock, []byte("archive bytes"))
	if err != nil || len(names) != 1 || names[0] != "localhost/lever/lev:abc" || string(got) != "archive bytes" {
		t.Fatalf("load: %v %v (server got %q)", names, err, got)
	}
	if _, err := load(sock, []byte("bad archive")); err == nil || !strings.Contains(err.Error(), "podman refused the image: payload does not match") {
		t.Errorf("refusal: %v", err)
	}
	if _, err := load(filepath.Join(t.TempDir(), "none.sock"), nil); err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("no listener: %v", err)
	}
}

// The tree goes only under directories root owns and only root can write: a parent the
// run user could rename or fill is refused before anything is made.
func TestRootOwnedDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	base := t.TempDir() // under /tmp: sticky, so allowed
	os.Chmod(base, 0o755)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	other := filepath.Join(base, "other")
	os.Mkdir(other, 0o755)
	os.Chown(other, 1234, 1234)
	link := filepath.Join(base, "link")
	os.Symlink(base, link)
	for _, tc := range []struct {
		dir  string
		want string
	}{
		{filepath.Join(open, "wb"), "not a root-owned directory only root can write"},
		{filepath.Join(other, "wb"), "not a root-owned directory only root can write"},
		{filepath.Join(link, "wb"), "not a root-owned directory only root can write"},
		{filepath.Join(base, "made", "wb"), ""}, // control: made, root's, 0755
	} {
		err := rootOwnedDirs(tc.dir)
		if tc.want == "" {
			fi, serr := os.Stat(tc.dir)
			if err != nil || serr != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: %v %v", tc.dir, err, serr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.dir, err)
		}
		if _, err := os.Lstat(tc.dir); err == nil {
			t.Errorf("%s was made", tc.dir)
		}
	}
}
