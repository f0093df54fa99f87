package brokerctl

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
)

// headerRuns are the ways a client could run a header block together, given its lines in
// the order they arrive ("Name: value"): as written (names and values, separators
// dropped), the values alone, the names alone.
func headerRuns(lines []string) map[string]string {
	var wire, vals, names strings.Builder
	for _, l := range lines {
		n, v, ok := strings.Cut(l, ": ")
		if !ok {
			continue
		}
		wire.WriteString(n + v)
		vals.WriteString(v)
		names.WriteString(n)
	}
	return map[string]string{"wire": wire.String(), "values": vals.String(), "names": names.String()}
}

// sortedLines lists a parsed header as net/http writes it: names sorted, each value on a
// line of its own.
func sortedLines(h http.Header) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// TestKeySplitAcrossResponseHeaders: an upstream answer that carries the key split over
// two values of one header, between a header's name and its value, over the values of two
// headers, or over two header names, reaches the jail as a header block in which a client
// running the values (or the names, or both) together would find it. Read raw over real
// mTLS (HTTP/1.1, so nothing reassembles the headers). Controls: the upstream's own header
// block, run together the same way, holds the key; a benign split header arrives unchanged.
func TestKeySplitAcrossResponseHeaders(t *testing.T) {
	half := len(testKey) / 2
	// Split where the two names sort in order ("Sk-Lever-Te" < "St-4f9c...").
	nameCut := strings.Index(testKey, "st-")
	rows := []struct {
		name string
		set  func(h http.Header)
	}{
		{"two values of one header", func(h http.Header) { h.Add("X-A", testKey[:half]); h.Add("X-A", testKey[half:]) }},
		{"a name and its value", func(h http.Header) { h["X-"+testKey[:half]] = []string{testKey[half:]} }},
		{"the values of two headers", func(h http.Header) { h.Set("X-A", testKey[:half]); h.Set("X-B", testKey[half:]) }},
		{"two names", func(h http.Header) { h.Set(testKey[:nameCut], "1"); h.Set(testKey[nameCut:], "2") }},
	}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := r.URL.Query().Get("m")
		if m == "control" {
			w.Header().Add("X-A", "benign-first")
			w.Header().Add("X-A", "benign-second")
		}
		for _, rw := range rows {
			if rw.name == m {
				rw.set(w.Header())
			}
		}
		w.Write([]byte(`{"ok":true}`))
	}), func(o *Options) { o.LLMRoutes = []string{"GET /v1/models"} })
	cert := h.workerCert("w1")
	raw := func(m string) string {
		tc := &tls.Config{RootCAs: h.srv.CA.Pool(), MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}}
		conn, err := tls.Dial("tcp", h.srv.JailAddr(), tc)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /llm/v1/models?m=%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", strings.ReplaceAll(m, " ", "+"))
		b, _ := io.ReadAll(bufio.NewReader(conn))
		return string(b)
	}
	if got := raw("control"); !strings.Contains(got, "X-A: benign-first\r\nX-A: benign-second\r\n") {
		t.Fatalf("control: %q", got)
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			// Control: the upstream's header, run together, holds the key.
			resp, err := h.upstream.Client().Get(h.upstream.URL + "/v1base/v1/models?m=" + strings.ReplaceAll(rw.name, " ", "+"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			found := false
			for _, run := range headerRuns(sortedLines(resp.Header)) {
				found = found || strings.Contains(strings.ToLower(run), strings.ToLower(testKey))
			}
			if !found {
				t.Fatalf("control: the upstream's header %v does not hold the key", resp.Header)
			}
			got := raw(rw.name)
			if !strings.Contains(got, " 200 ") {
				t.Fatalf("%q", got)
			}
			head, _, _ := strings.Cut(got, "\r\n\r\n")
			for kind, run := range headerRuns(strings.Split(head, "\r\n")) {
				if strings.Contains(strings.ToLower(run), strings.ToLower(testKey)) {
					t.Errorf("the key reaches the jail split across header %s:\n%s", kind, got)
				}
			}
		})
	}
}

// TestKeySplitBetweenHeaderAndBody: an upstream puts the start of the key at the end of a
// header value and the rest at the start of the body, so a client reading the header and
// then the body has it whole. The header waits for the body's first bytes when it ends in
// minHold characters or more of the key, and both parts are masked; a shorter end goes out
// at once and only the body's part is masked. Through the real listener, the body
// decoded by the client. Controls: the upstream's header value and body, joined, hold the
// key; a header that only looks like the key's start, followed by a body that breaks it,
// arrives unchanged, with a plain body and with an event stream.
func TestKeySplitBetweenHeaderAndBody(t *testing.T) {
	const cut = 17
	stars := func(n int) string { return strings.Repeat("*", n) }
	rows := []struct {
		name    string
		ct      string            // response Content-Type ("": none set)
		hdr     map[string]string // header values set
		body    string
		wantHdr map[string]string // what the client must get
		want    string
		attack  bool // the upstream's header and body, joined, hold the key
	}{
		{"half in a header, half in the body", "", map[string]string{"X-Note": testKey[:cut]}, testKey[cut:],
			map[string]string{"X-Note": stars(cut)}, stars(len(testKey) - cut), true},
		{"two characters in a header", "", map[string]string{"X-Note": testKey[:keymask.MinHold-1]}, testKey[keymask.MinHold-1:],
			map[string]string{"X-Note": testKey[:keymask.MinHold-1]}, stars(len(testKey) - keymask.MinHold + 1), true},
		{"two headers' values, then the body", "", map[string]string{"X-A": testKey[:10], "X-B": testKey[10:20]}, testKey[20:],
			map[string]string{"X-A": stars(10), "X-B": stars(10)}, stars(len(testKey) - 20), true},
		{"half in a header, half in an event stream", "text/event-stream", map[string]string{"X-Note": testKey[:cut]}, testKey[cut:] + "\n\ndata: {}\n\n",
			map[string]string{"X-Note": stars(cut)}, stars(len(testKey)-cut) + "\n\ndata: {}\n\n", true},
		// Nothing in the body can complete it: it is masked as a held partial is at the
		// end of a stream.
		{"the key's start in a header, an empty body", "", map[string]string{"X-Note": testKey[:cut]}, "",
			map[string]string{"X-Note": stars(cut)}, "", false},
		{"control: a header ending in sk-, a JSON body", "application/json", map[string]string{"X-Note": "req-sk-"}, `{"ok":true}`,
			map[string]string{"X-Note": "req-sk-"}, `{"ok":true}`, false},
		{"control: a header ending in sk-, an event stream", "text/event-stream", map[string]string{"X-Note": "req-sk-"}, "data: {}\n\n",
			map[string]string{"X-Note": "req-sk-"}, "data: {}\n\n", false},
	}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, rw := range rows {
			if rw.name == r.URL.Query().Get("m") {
				if rw.ct != "" {
					w.Header().Set("Content-Type", rw.ct)
				}
				for k, v := range rw.hdr {
					w.Header().Set(k, v)
				}
				io.WriteString(w, rw.body)
				return
			}
		}
		http.Error(w, "no such row", 404)
	}), func(o *Options) { o.LLMRoutes = []string{"GET /v1/models"} })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	fetch := func(c *http.Client, base, m string) (http.Header, string) {
		resp, err := c.Get(base + "/v1/models?m=" + strings.ReplaceAll(m, " ", "+"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %q %v", m, resp.StatusCode, b, err)
		}
		return resp.Header, string(b)
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			if rw.attack {
				uh, ub := fetch(h.upstream.Client(), h.upstream.URL+"/v1base", rw.name)
				if run := headerRuns(sortedLines(uh))["values"] + ub; !strings.Contains(run, testKey) {
					t.Fatalf("control: the upstream's values and body, joined, %q hold no key", run)
				}
			}
			hdr, body := fetch(c, h.url+"/llm", rw.name)
			for k, want := range rw.wantHdr {
				if got := hdr.Get(k); got != want {
					t.Errorf("header %s: %q, want %q", k, got, want)
				}
			}
			if body != rw.want {
				t.Errorf("body %q, want %q", body, rw.want)
			}
			for _, v := range append(sortedLines(hdr), headerRuns(sortedLines(hdr))["values"]) {
				if strings.Contains(v+body, testKey[keymask.MinHold-1:]) {
					t.Errorf("%q and the body %q rebuild the key", v, body)
				}
			}
		})
	}
}
