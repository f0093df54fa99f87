package tomlx

import (
	"strings"
	"testing"
)

type inner struct {
	Kind string `toml:"kind"`
}

type doc struct {
	Name   string            `toml:"name"`
	Inner  inner             `toml:"inner"`
	Tables map[string]*inner `toml:"t"`
	List   []inner           `toml:"list"`
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"unknown top key", "name = \"a\"\nnmae = \"b\"\n", `f.toml:2: unknown key "nmae"`},
		{"unknown nested key", "[inner]\nkind = \"x\"\nknid = \"y\"\n", `f.toml:3: unknown key "inner.knid"`},
		{"unknown key in map table", "[t.a]\nkind = \"x\"\n[t.b]\nkidn = 1\n", `f.toml:4: unknown key "t.b.kidn"`},
		{"unknown key in inline table", "inner = { kind = \"x\", nope = 1 }\n", `unknown key "inner.nope"`},
		{"unknown key in array table", "[[list]]\nkind = \"a\"\n[[list]]\nbad = 1\n", `f.toml:4: unknown key "list.bad"`},
		{"wrong type", "name = 3\n", `f.toml:1: key "name"`},
		{"syntax error", "name = \"a\n", `f.toml:1:`},
		{"table in another case", "[Inner]\nkind = \"x\"\n", `f.toml:1: unknown key "Inner" (keys are case-sensitive: the key is "inner")`},
		{"key in another case", "[inner]\nKind = \"x\"\n", `f.toml:2: unknown key "inner.Kind" (keys are case-sensitive: the key is "kind")`},
		{"two spellings of one table", "[inner]\nkind = \"x\"\n[INNER]\nkind = \"y\"\n", `f.toml:3: unknown key "INNER"`},
		{"array table in another case", "[[List]]\nkind = \"a\"\n", `f.toml:1: unknown key "List"`},
		{"key under array table in another case", "[[list]]\nKIND = \"a\"\n", `f.toml:2: unknown key "list.KIND"`},
		{"inline key in another case", "inner = { KIND = \"x\" }\n", `unknown key "inner.KIND"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			_, err := Decode("f.toml", []byte(tc.text), &d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLines(t *testing.T) {
	var d doc
	text := "name = \"a\"\n\n[t.first]\nkind = \"x\"\n[t.second]\nkind = \"y\"\ninner = { kind = \"z\" }\n"
	text = strings.Replace(text, "inner = { kind = \"z\" }\n", "", 1)
	doc, err := Decode("f.toml", []byte(text), &d)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"name": 1, "t.first": 3, "t.first.kind": 4, "t.second": 5, "t.second.kind": 6}
	for k, v := range want {
		if doc.Line(k) != v {
			t.Errorf("Line(%s) = %d, want %d", k, doc.Line(k), v)
		}
	}
	if err := doc.Errorf("t.second.kind.deeper", "bad"); !strings.HasPrefix(err.Error(), "f.toml:6: ") {
		t.Errorf("Errorf falls back to the nearest key: %v", err)
	}
}
