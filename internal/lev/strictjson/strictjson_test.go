package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
)

type fetch struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	N       int               `json:"n"`
	Out     json.RawMessage   `json:"out"`
	Paths   []string          `json:"paths"`
	Kind    string            `json:"kind"`
}

// TestDecodeStrict: every spelling encoding/json would fold into the url field, every
// duplicate, wrong type and trailing byte is refused with the key named; the plain
// spellings (including an escaped key that IS "url") decode.
func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		name, in, err, url string
	}{
		{"plain", `{"url":"a"}`, "", "a"},
		{"escaped key is the same key", `{"\u0075rl":"a"}`, "", "a"},
		{"empty", ``, "", ""},
		{"upper", `{"URL":"b"}`, `unknown argument "URL" (the argument is "url"; keys are case-sensitive)`, ""},
		{"mixed", `{"Url":"b"}`, `unknown argument "Url" (the argument is "url"; keys are case-sensitive)`, ""},
		{"both cases", `{"url":"a","URL":"b"}`, `arguments "url" and "URL" are the same key in a different case; keys are case-sensitive and must not repeat`, ""},
		{"both cases escaped", `{"url":"a","\u0055RL":"b"}`, `arguments "url" and "URL" are the same key`, ""},
		{"exact duplicate", `{"url":"a","url":"b"}`, `argument "url" appears twice`, ""},
		{"kelvin sign folds to k", `{"\u212aind":"x"}`, "unknown argument \"\u212aind\" (the argument is \"kind\"", ""},
		{"kelvin sign duplicate", `{"kind":"a","\u212aind":"b"}`, "arguments \"kind\" and \"\u212aind\" are the same key", ""},
		{"long s folds to s", `{"path\u017f":["x"]}`, `unknown argument "pathſ" (the argument is "paths"`, ""},
		{"long s duplicate", `{"paths":["a"],"path\u017f":["b"]}`, `arguments "paths" and "pathſ" are the same key`, ""},
		{"unknown", `{"uri":"a"}`, `unknown argument "uri"`, ""},
		{"header case duplicate", `{"url":"a","headers":{"Host":"x","host":"y"}}`, `arguments "headers.Host" and "headers.host" are the same key`, ""},
		{"nested exact duplicate in free JSON", `{"out":{"a":1,"a":2}}`, `argument "out.a" appears twice`, ""},
		{"nested case pair in free JSON is data", `{"out":{"a":1,"A":2}}`, "", ""},
		{"wrong type", `{"url":5}`, `argument "url": want a string, got a JSON number`, ""},
		{"wrong type object", `{"url":{"x":1}}`, `argument "url": want a string, got a JSON object`, ""},
		{"wrong type int", `{"n":"5"}`, `argument "n": want an integer, got a JSON string`, ""},
		{"trailing object", `{"url":"a"}{"url":"b"}`, "trailing data after the arguments object", ""},
		{"trailing garbage", `{"url":"a"} x`, "trailing data", ""},
		{"not an object", `["url"]`, "must be a JSON object, not an array", ""},
		{"truncated", `{"url":"a"`, "end early", ""},
		{"too deep", `{"out":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, "nest deeper than 200 levels", ""},
		{"deep but within the bound", `{"out":` + strings.Repeat("[", 150) + strings.Repeat("]", 150) + `}`, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f fetch
			err := Decode([]byte(c.in), &f)
			if c.err == "" {
				if err != nil || f.URL != c.url {
					t.Fatalf("got %v url %q, want url %q", err, f.URL, c.url)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
		})
	}
}

// Positive control for the class: encoding/json itself folds these keys into the field.
func TestStdlibFolds(t *testing.T) {
	for _, in := range []string{`{"URL":"b"}`, `{"Url":"b"}`, `{"url":"a","URL":"b"}`} {
		var f fetch
		if err := json.Unmarshal([]byte(in), &f); err != nil || f.URL != "b" {
			t.Fatalf("encoding/json no longer folds %s: %v %q", in, err, f.URL)
		}
	}
	var k struct {
		K int `json:"k"`
	}
	if json.Unmarshal([]byte(`{"\u212a":7}`), &k); k.K != 7 {
		t.Fatal("encoding/json no longer folds the Kelvin sign")
	}
}

func TestObject(t *testing.T) {
	if _, err := Object([]byte(`{"url":"a","URL":"b"}`)); err == nil {
		t.Fatal("object with case-folded duplicate keys decoded")
	}
	m, err := Object([]byte(`{"channel":"x","n":1}`))
	if err != nil || m["channel"] != "x" {
		t.Fatalf("%v %v", m, err)
	}
}
