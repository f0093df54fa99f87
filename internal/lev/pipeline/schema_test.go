package pipeline

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"
)

// TestSchemasDerivedFromArgTypes: each built-in's schema, now derived from its argument
// type, is exactly the one lev offered when schemas were written by hand (the golden
// strings below; the tools added since, and edit_file's edits, have their own golden
// strings here), so a change of a type is a change of what the model is offered; and a schema names exactly
// the keys the strict decoder accepts (a key the schema lacks is refused by the decoder,
// and every key it names decodes).
func TestSchemasDerivedFromArgTypes(t *testing.T) {
	golden := map[string]string{
		"read_file":  `{"type":"object","properties":{"path":{"type":"string"},"offset":{"type":"integer"},"max_bytes":{"type":"integer"}},"required":["path"],"additionalProperties":false}`,
		"read_files": `{"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"}}},"required":["paths"],"additionalProperties":false}`,
		"list_dir":   `{"type":"object","properties":{"path":{"type":"string"}},"required":[],"additionalProperties":false}`,
		"write_file": `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`,
		// edit_file: one edit (old_string, new_string) or several (edits), so only path is
		// required; validate demands one form or the other.
		"edit_file":     `{"type":"object","properties":{"path":{"type":"string"},"old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean"},"edits":{"type":"array","items":{"type":"object","properties":{"old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean"}},"required":["old_string","new_string"],"additionalProperties":false}}},"required":["path"],"additionalProperties":false}`,
		"glob":          `{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"],"additionalProperties":false}`,
		"grep":          `{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"},"glob":{"type":"string"},"case_insensitive":{"type":"boolean"},"context":{"type":"integer"},"max_matches":{"type":"integer"}},"required":["pattern"],"additionalProperties":false}`,
		"todo_write":    `{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object","properties":{"content":{"type":"string"},"status":{"type":"string"}},"required":["content","status"],"additionalProperties":false}}},"required":["todos"],"additionalProperties":false}`,
		"todo_read":     `{"type":"object","properties":{},"required":[],"additionalProperties":false}`,
		"context_list":  `{"type":"object","properties":{},"required":[],"additionalProperties":false}`,
		"context_drop":  `{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"}}},"required":["ids"],"additionalProperties":false}`,
		"shell":         `{"type":"object","properties":{"command":{"type":"string"},"timeout_seconds":{"type":"integer"}},"required":["command"],"additionalProperties":false}`,
		"web_fetch":     `{"type":"object","properties":{"url":{"type":"string"}},"required":["url"],"additionalProperties":false}`,
		"http_get":      `{"type":"object","properties":{"url":{"type":"string"},"headers":{"type":"object","additionalProperties":{"type":"string"}}},"required":["url"],"additionalProperties":false}`,
		"http_post":     `{"type":"object","properties":{"url":{"type":"string"},"body":{"type":"string"},"content_type":{"type":"string"},"headers":{"type":"object","additionalProperties":{"type":"string"}}},"required":["url"],"additionalProperties":false}`,
		"web_search":    `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"],"additionalProperties":false}`,
		"submit_output": `{"type":"object","properties":{"output":{}},"required":["output"],"additionalProperties":false}`,
		"ask_operator":  `{"type":"object","properties":{"question":{"type":"string"}},"required":["question"],"additionalProperties":false}`,
		"spawn_agent":   `{"type":"object","properties":{"task":{"type":"string"},"tools":{"type":"array","items":{"type":"string"}},"read_paths":{"type":"array","items":{"type":"string"}},"network":{"type":"boolean"},"label":{"type":"string"}},"required":["task","tools"],"additionalProperties":false}`,
		"install_tool":  `{"type":"object","properties":{"name":{"type":"string"},"script":{"type":"string"},"replace":{"type":"boolean"}},"required":["name","script"],"additionalProperties":false}`,
	}
	if got := Names(); !reflect.DeepEqual(got, sortedKeys(golden)) {
		t.Fatalf("tools %v, want %v", got, sortedKeys(golden))
	}
	for name, want := range golden {
		tool := Lookup(name)
		if string(tool.Schema) != want {
			t.Errorf("%s:\n got  %s\n want %s", name, tool.Schema, want)
		}
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		json.Unmarshal(tool.Schema, &s)
		if _, err := DecodeArgs(name, []byte(`{"not_in_schema": 1}`)); err == nil {
			t.Errorf("%s: a key outside the schema decoded", name)
		}
		for k := range s.Properties {
			// Each named key decodes (a value of its type; validation may still refuse it,
			// but not as an unknown argument).
			if _, err := DecodeArgs(name, []byte(`{"`+k+`": null}`)); err != nil && containsUnknown(err.Error()) {
				t.Errorf("%s: schema key %q is unknown to the decoder: %v", name, k, err)
			}
		}
	}
}

func containsUnknown(s string) bool { return len(s) >= 16 && s[:16] == "unknown argument" }

func sortedKeys(m map[string]string) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	for i := range k {
		for j := i + 1; j < len(k); j++ {
			if k[j] < k[i] {
				k[i], k[j] = k[j], k[i]
			}
		}
	}
	return k
}

// Names lists the built-in tools (for the tests: nothing in lev needs the list).
func Names() []string {
	var n []string
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
