package bodypolicy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestBodyTable: the policy on its own, through Body as the broker streams a request:
// every row is read whole and read one byte at a time (a refusal may not depend on how the
// body is cut). A refused body never comes out whole (its last byte is held until the end
// is found clean), and Refusal names what was found; an allowed body comes out byte for
// byte. The broker's attack tests (TestUpstreamFetchRequestsRefused and its neighbours)
// send the same kinds of body over mTLS.
func TestBodyTable(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		refusal    string // "" for a body that passes
	}{
		{"control: function tool", `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[]}`, ""},
		{"control: client bash tool", `{"tools":[{"type":"bash_20250124","name":"bash"}]}`, ""},
		{"control: url in tool_use history", `{"messages":[{"content":[{"type":"tool_use","input":{"url":"https://example.com"}}]}]}`, ""},
		{"control: data url image", `{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`, ""},
		{"control: lev's anthropic web search", `{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}]}`, ""},
		{"control: lev's openai web search", `{"tools":[{"type":"web_search","external_web_access":false}]}`, ""},
		{"control: prompt as text", `{"prompt":"say hi"}`, ""},
		{"control: scalar and nesting", `[1, -2.5e3, true, null, {"a": [[], {}]}, "\u00e9\n"]`, ""},
		{"server tool", `{"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}`, `tool type "web_fetch_20250910" is a server tool`},
		{"escaped tool type", `{"tools":[{"type":"web\u005ffetch_20250910"}]}`, `tool type "web_fetch_20250910"`},
		{"web search with extra key", `{"tools":[{"type":"web_search_20250305","name":"web_search","allowed_domains":["x"]}]}`, `with key "allowed_domains"`},
		{"openai web search with live fetch", `{"tools":[{"type":"web_search"}]}`, `"external_web_access": false`},
		{"two server tools", `{"tools":[{"type":"web_search","external_web_access":false},{"type":"web_search","external_web_access":false}]}`, "more than one server tool"},
		{"web search max_uses past the cap", `{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":11}]}`, "not the value lev sends"},
		{"web search key in upper case", `{"tools":[{"type":"web_search","External_Web_Access":false}]}`, "spelled as lev spells them"},
		{"mcp_servers", `{"mcp_servers":[]}`, `request field "mcp_servers"`},
		{"mcp_servers by Unicode folding", `{"mcp_ſervers":[]}`, `request field "mcp_ſervers"`},
		{"gateway credential", `{"api_base":"https://evil.test"}`, `request field "api_base"`},
		{"image source by url", `{"messages":[{"content":[{"source":{"type":"url","url":"https://evil.test/x"}}]}]}`, `request field "url" holds "https://evil.test/x"`},
		{"file_data url", `{"file_data":"https://evil.test/d.pdf"}`, `request field "file_data"`},
		{"stored prompt", `{"prompt":{"id":"pmpt_1"}}`, "stored prompt"},
		{"not UTF-8", "{\"a\":\"\xc1\xb3\"}", "not UTF-8"},
		{"surrogate in UTF-8", "{\"a\":\"\xed\xa0\x80\"}", "not UTF-8"},
		{"two values", `{} {}`, "not one well-formed JSON value"},
		{"trailing comma", `{"a":1,}`, "not one well-formed JSON value"},
		{"bad literal", `{"a":tru}`, `"tru" is not a JSON literal`},
		{"truncated", `{"a":[1,2`, "ends before its JSON value does"},
		{"too deep", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), "nests deeper than"},
	} {
		for _, cut := range []string{"whole", "bytewise"} {
			t.Run(tc.name+"/"+cut, func(t *testing.T) {
				var src io.Reader = strings.NewReader(tc.body)
				if cut == "bytewise" {
					src = iotest.OneByteReader(src)
				}
				b := NewBody(src)
				out, err := io.ReadAll(b)
				if tc.refusal == "" {
					if err != nil || b.Refusal() != nil || !bytes.Equal(out, []byte(tc.body)) {
						t.Fatalf("control refused or changed: %v, %v, %q", err, b.Refusal(), out)
					}
					return
				}
				r := b.Refusal()
				if r == nil || !errors.Is(err, r) || !strings.Contains(r.Error(), tc.refusal) {
					t.Fatalf("refusal %v (read error %v); want one saying %q", r, err, tc.refusal)
				}
				if len(out) >= len(tc.body) {
					t.Fatalf("a refused body came out whole: %q", out)
				}
			})
		}
	}
}

// TestBodyPassesTheSourcesError: a read error of the request itself (a client gone, a
// body over the cap) comes back as it is, and is not a refusal of the policy.
func TestBodyPassesTheSourcesError(t *testing.T) {
	boom := errors.New("client went away")
	b := NewBody(io.MultiReader(strings.NewReader(`{"a":`), iotest.ErrReader(boom)))
	if _, err := io.ReadAll(b); !errors.Is(err, boom) {
		t.Fatalf("read error %v, want %v", err, boom)
	}
	if r := b.Refusal(); r != nil {
		t.Fatalf("the source's error counted as a refusal: %v", r)
	}
	var nb *Body
	if nb.Refusal() != nil {
		t.Fatal("Refusal of a nil Body (a request without a body) is not nil")
	}
}
