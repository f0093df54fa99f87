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

// TestKeySplitAcrossManyKeysPlainJSON: a plain JSON answer (read whole and masked with its
// string values joined per key) whose values first use more distinct keys than the SSE
// masker keeps channels for, then carry the key split over "text" values with "type"
// values between them. A client joining the "text" values must not rebuild it. Control:
// the same body with a benign string comes back byte for byte.
func TestKeySplitAcrossManyKeysPlainJSON(t *testing.T) {
	secret := "the answer is " + testKey + " done"
	benign := "the answer is sk-not-the-key-at-all-0123 done"
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s := secret
		if r.URL.Query().Get("benign") != "" {
			s = benign
		}
		var b strings.Builder
		b.WriteString(`{"meta":{`)
		for i := 0; i < 3*keymask.MaxChannels; i++ {
			fmt.Fprintf(&b, `"k%d":"v",`, i)
		}
		b.WriteString(`"z":"v"},"content":[`)
		for i := 0; i < len(s); i += 4 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"type":"text","text":%q}`, s[i:min(i+4, len(s))])
		}
		b.WriteString("]}")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, b.String())
	}), func(o *Options) { o.LLMRoutes = []string{"POST /v1/messages"} })
	cert := h.workerCert("w1")
	join := func(q string) string {
		code, body, err := get(h.client(&cert), "POST", h.url+"/llm/v1/messages"+q, "{}")
		if err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
		var doc struct{ Content []struct{ Text string } }
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("%v: %q", err, capText(body, 200))
		}
		var j strings.Builder
		for _, c := range doc.Content {
			j.WriteString(c.Text)
		}
		return j.String()
	}
	if got := join("?benign=1"); got != benign {
		t.Fatalf("control: benign body joins to %q", got)
	}
	if got := join(""); strings.Contains(got, testKey[keymask.MinHold-1:]) || !strings.Contains(got, "****") {
		t.Errorf("joined text values rebuild the key: %q", got)
	}
}

// TestKeySplitAcrossJSONNamesPlain: a plain JSON answer spreads the key over object names
// ({"sk-le":1}, {"ver-t":1}, ...), which a client walking the document reads in order as
// readily as values. Through the real listener; the names are read back in document order.
// Controls: the upstream's own names join to the key; a benign string spread the same way
// comes back byte for byte.
func TestKeySplitAcrossJSONNamesPlain(t *testing.T) {
	secret := "the answer is " + testKey + " done"
	benign := "the answer is sk-not-the-key-at-all-0123 done"
	build := func(s string) string {
		var b strings.Builder
		b.WriteString(`{"content":[`)
		for i := 0; i < len(s); i += 5 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{%q:[1,2]}`, s[i:min(i+5, len(s))])
		}
		b.WriteString("]}")
		return b.String()
	}
	// names joins the object names of a JSON document in the order they appear.
	names := func(doc string) string {
		dec := json.NewDecoder(strings.NewReader(doc))
		var out strings.Builder
		var inObj []bool // per open container: an object, expecting a name next
		expectName := false
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch v := tok.(type) {
			case json.Delim:
				switch v {
				case '{':
					inObj = append(inObj, true)
					expectName = true
				case '[':
					inObj = append(inObj, false)
					expectName = false
				default:
					inObj = inObj[:len(inObj)-1]
					expectName = len(inObj) > 0 && inObj[len(inObj)-1]
				}
				continue
			case string:
				if expectName {
					out.WriteString(v)
					expectName = false
					continue
				}
			}
			expectName = len(inObj) > 0 && inObj[len(inObj)-1]
		}
		return out.String()
	}
	if got := names(build(secret)); !strings.Contains(got, testKey) {
		t.Fatalf("control: the upstream's names join to %q", got)
	}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s := secret
		if r.URL.Query().Get("benign") != "" {
			s = benign
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, build(s))
	}), func(o *Options) { o.LLMRoutes = []string{"POST /v1/messages"} })
	cert := h.workerCert("w1")
	fetch := func(q string) string {
		code, body, err := get(h.client(&cert), "POST", h.url+"/llm/v1/messages"+q, "{}")
		if err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
		return body
	}
	if got := fetch("?benign=1"); got != build(benign) {
		t.Fatalf("control: benign body came back as %q", got)
	}
	got := fetch("")
	if p := keyPiece(names(got)); p != "" || !strings.Contains(got, "****") {
		t.Errorf("the names join holds %q of the key: %q", p, names(got))
	}
}
