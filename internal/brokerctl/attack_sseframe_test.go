package brokerctl

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
)

// sseJoins parses an event stream the way the EventSource specification does (a leading
// BOM is dropped; CRLF, CR and LF all end a line; a blank line ends an event; ':' starts a
// comment; a line of any other field is ignored) and returns what a client in the jail
// could join across events: the data values (a JSON line's string values, in order, else
// the line), only the "text" values of JSON lines, the object names of JSON lines, and
// the values of every other field and of comments.
func sseJoins(raw string) map[string]string {
	raw = strings.TrimPrefix(raw, "\uFEFF")
	raw = strings.ReplaceAll(raw, "\r\n", "\n")
	raw = strings.ReplaceAll(raw, "\r", "\n")
	j := map[string]*strings.Builder{"data": {}, "text": {}, "names": {}, "event": {}, "id": {}, "comment": {}}
	for _, line := range strings.Split(raw, "\n") {
		if line == "" {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			j["comment"].WriteString(value)
		case "data":
			if !json.Valid([]byte(value)) {
				j["data"].WriteString(value)
				continue
			}
			walkJSON(value, func(key, str string, isName bool) {
				switch {
				case isName:
					j["names"].WriteString(str)
				default:
					j["data"].WriteString(str)
					if key == "text" {
						j["text"].WriteString(str)
					}
				}
			})
		default:
			if b := j[field]; b != nil {
				b.WriteString(value)
			}
		}
	}
	out := map[string]string{}
	for k, b := range j {
		out[k] = b.String()
	}
	return out
}

// walkJSON calls f for each object name and string value of the valid JSON text v, in
// document order, with the name a string value sits under (an array's items keep their
// array's name). Order matters: a join built by ranging over a decoded Go map is shuffled
// on every run, and a shuffled join of names like "k81" can spell a piece of the key by
// chance.
func walkJSON(v string, f func(key, str string, isName bool)) {
	dec := json.NewDecoder(strings.NewReader(v))
	type frame struct {
		object  bool
		wantKey bool
		key     string
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		key := ""
		if top != nil {
			key = top.key
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, frame{object: t == '{', wantKey: t == '{', key: key})
				continue
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.object && top.wantKey {
				f("", t, true)
				top.key, top.wantKey = t, false
				continue
			}
			f(key, t, false)
		}
		// A value ended: an object's next token is a name again.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
}

// TestKeySplitAcrossSSEFraming: an upstream spreads the key over several events in ways
// the SSE masker's view of the stream did not cover: a byte order mark before the first
// line (a client drops it, so the first line is a data line), bare CR line endings (a
// legal SSE line break), the key in event names, ids, comments or JSON object names
// instead of data values, a stream that first fills the masker's table of JSON keys so the
// deltas' key gets no channel of its own, and streams labelled as something else behind a
// preamble an SSE parser skips (an unknown field, many line breaks, a JSON document, a
// line too long to hold). Each row is sent twice: with the key, a client joining what it
// receives must not find more than minHold-1 characters of it; with a benign string of the
// same shape, the join must be exactly that string (the stream parses and the split
// reaches the client as sent). Positive control: the upstream's bytes for the key row,
// joined the same way, rebuild the key.
func TestKeySplitAcrossSSEFraming(t *testing.T) {
	// parts splits s into the pieces each event carries.
	parts := func(s string, n int) []string {
		var out []string
		for i := 0; i < len(s); i += n {
			out = append(out, s[i:min(i+n, len(s))])
		}
		return out
	}
	type row struct {
		name  string
		join  string // which join must hold the string
		build func(s string) string
		ct    string // Content-Type ("": text/event-stream; "-": none)
	}
	deltas := func(s string) string {
		var b strings.Builder
		for _, p := range parts(s, 4) {
			fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"delta\":{\"text\":%q}}\n\n", p)
		}
		return b.String()
	}
	rows := []row{
		{"bom before the first data line", "data", func(s string) string {
			p := []string{s[:18], s[18:]} // "...sk-l" | "ever-..."
			return "\uFEFFdata: " + p[0] + "\n\ndata: " + p[1] + "\n\n"
		}, ""},
		{"bare CR line endings", "data", func(s string) string {
			var b strings.Builder
			for _, p := range parts(s, 5) {
				fmt.Fprintf(&b, "data: %s\r\r", p)
			}
			return b.String()
		}, ""},
		{"bare CR line endings, JSON deltas", "text", func(s string) string {
			var b strings.Builder
			for _, p := range parts(s, 5) {
				fmt.Fprintf(&b, "data: {\"text\":%q}\r\rdata: {\"type\":\"ping\"}\r\r", p)
			}
			return b.String()
		}, ""},
		{"event names", "event", func(s string) string {
			var b strings.Builder
			for _, p := range parts(s, 5) {
				fmt.Fprintf(&b, "event: %s\ndata: {}\n\n", p)
			}
			return b.String()
		}, ""},
		{"ids", "id", func(s string) string {
			var b strings.Builder
			for _, p := range parts(s, 5) {
				fmt.Fprintf(&b, "id: %s\ndata: {}\n\n", p)
			}
			return b.String()
		}, ""},
		{"comments", "comment", func(s string) string {
			var b strings.Builder
			for _, p := range parts(s, 5) {
				fmt.Fprintf(&b, ": %s\n\n", p)
			}
			return b.String()
		}, ""},
		// An event stream labelled as something else is still one to a client.
		{"stream labelled text/plain", "text", deltas, "text/plain"},
		{"stream labelled application/json", "text", deltas, "application/json"},
		{"stream without a Content-Type", "text", deltas, "-"},
		{"stream labelled octet-stream, BOM and blank lines first", "text", func(s string) string { return "\uFEFF\r\n\n" + deltas(s) }, "application/octet-stream"},
		// An SSE parser ignores a line whose field it does not know, and skips blank lines,
		// however many: nothing before the events tells a client the body is not a stream.
		{"unknown field first, labelled application/json", "text", func(s string) string { return "x: y\n" + deltas(s) }, "application/json"},
		{"80 line breaks first, labelled text/plain", "text", func(s string) string { return strings.Repeat("\n", 80) + deltas(s) }, "text/plain"},
		// Past joinLimit, so the joined-JSON masking of plain bodies does not reach the events.
		{"a JSON document first, labelled application/json", "text", func(s string) string {
			return `{"id":"msg_1","pad":"` + strings.Repeat("p", keymask.JoinLimit) + `"}` + "\n" + deltas(s)
		}, "application/json"},
		{"unknown field first, bare CR line endings", "text", func(s string) string {
			return strings.ReplaceAll("x: y\n"+deltas(s), "\n", "\r")
		}, "text/plain"},
		// A line longer than the broker holds, which an SSE parser ignores, between the
		// halves; and a data line longer than that before them, which it reads.
		{"a long unknown line between the halves", "text", func(s string) string {
			return deltas(s[:20]) + "x: " + strings.Repeat("y", 3*plainLine) + "\n" + deltas(s[20:])
		}, "text/plain"},
		{"a long data line first", "text", func(s string) string {
			return "data: {\"pad\":\"" + strings.Repeat("p", 3*plainLine) + "\"}\n\n" + deltas(s)
		}, "application/octet-stream"},
		// JSON object names are strings a client reads too.
		{"object names", "names", func(s string) string {
			var b strings.Builder
			for _, p := range parts(s, 5) {
				fmt.Fprintf(&b, "data: {%q:1}\n\n", p)
			}
			return b.String()
		}, ""},
		{"object names, labelled application/json", "names", func(s string) string {
			var b strings.Builder
			for _, p := range parts(s, 5) {
				fmt.Fprintf(&b, "data: {%q:[2,true]}\n\n", p)
			}
			return b.String()
		}, "application/json"},
		// Under the masker's key table: the deltas join on their own channel and are masked.
		{"many keys, under the table", "text", keyTable(100, parts), ""},
	}
	// Past the table the stream ends with an error event rather than go on unjoined.
	const overKeys = 200
	rows = append(rows, row{"key table filled first", "", keyTable(overKeys, parts), ""})
	benign := "the answer is sk-not-the-key-at-all-0123 done"
	secret := "the answer is " + testKey + " done"
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		q := r.URL.Query()
		s := secret
		if q.Get("benign") != "" {
			s = benign
		}
		for _, rw := range rows {
			if rw.name == q.Get("row") {
				switch rw.ct {
				case "":
					w.Header().Set("Content-Type", "text/event-stream")
				case "-":
					w.Header()["Content-Type"] = nil // no sniffing either
				default:
					w.Header().Set("Content-Type", rw.ct)
				}
				io.WriteString(w, rw.build(s))
				return
			}
		}
		http.Error(w, "no such row", 404)
	}), func(o *Options) { o.LLMRoutes = []string{"POST /v1/messages"} })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	fetch := func(q string) string {
		resp, err := c.Post(h.url+"/llm/v1/messages?"+q, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", q, resp.StatusCode, b)
		}
		return string(b)
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			q := "row=" + strings.ReplaceAll(rw.name, " ", "+")
			if rw.join == "" {
				// Ended: not one delta reaches the client, the error names the cap.
				for _, q := range []string{q, q + "&benign=1"} {
					raw := fetch(q)
					if !strings.Contains(raw, `"type":"sse_keys"`) || strings.Contains(raw, "the a") {
						t.Errorf("%s: stream not ended at the key table: %q", q, capText(raw, 300))
					}
				}
				return
			}
			// Control: what the upstream sends for the key row rebuilds the key when joined.
			if got := sseJoins(rw.build(secret))[rw.join]; !strings.Contains(got, testKey) {
				t.Fatalf("the upstream's %s join %q does not hold the key", rw.join, capText(got, 300))
			}
			// Control: the benign stream reaches the client and joins back as sent.
			if got := sseJoins(fetch(q + "&benign=1"))[rw.join]; !strings.Contains(got, benign) {
				t.Fatalf("benign %s join %q does not hold %q", rw.join, got, benign)
			}
			raw := fetch(q)
			for name, got := range sseJoins(raw) {
				if p := keyPiece(got); p != "" {
					t.Errorf("the %s join holds %q of the key: %q (raw %q)", name, p, capText(got, 300), capText(raw, 400))
				}
			}
		})
	}
}

// keyPiece returns the first minHold characters of the key found in s, or "". At most
// minHold-1 characters of the key may reach a client before the masker holds the rest, so
// a longer piece is a leak. (The streams' own text, "the answer is", "content_block_delta",
// holds no such piece.)
func keyPiece(s string) string {
	for i := 0; i+keymask.MinHold <= len(testKey); i++ {
		if p := testKey[i : i+keymask.MinHold]; strings.Contains(s, p) {
			return p
		}
	}
	return ""
}

// keyTable builds a stream whose first event has string values under n distinct keys,
// then the deltas under "text", each followed by a ping whose "type" value comes between
// them on the all-values channel.
func keyTable(n int, parts func(string, int) []string) func(string) string {
	return func(s string) string {
		var b strings.Builder
		b.WriteString("data: {")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "\"k%d\":\"v\",", i)
		}
		b.WriteString("\"z\":\"v\"}\n\n")
		for _, p := range parts(s, 4) {
			fmt.Fprintf(&b, "data: {\"delta\":{\"text\":%q}}\n\ndata: {\"type\":\"ping\"}\n\n", p)
		}
		return b.String()
	}
}
