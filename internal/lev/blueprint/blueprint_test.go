package blueprint

import (
	"strings"
	"testing"
)

func known(n string) bool { return n == "read_file" || n == "shell" || n == "submit_output" }

const good = `name = "cto"
version = "1.0.0"
[tool_permissions]
shell = "deny"
[read_paths]
allow = ["~/.leviath/runs", "glob:~/design-docs/**"]
[sandbox]
kind = "container"
network = false
[taint_tracking]
enabled = true
on_violation = "deny"
clearances = { http_post = "public" }
[[seeds]]
file = "README.md"
[stages.analyze]
tools = ["read_file"]
[stages.analyze.sandbox]
kind = "none"
[stages.build]
tools = ["shell", "read_file"]
[stages.report]
tools = ["submit_output"]
`

func TestParseGood(t *testing.T) {
	bp, err := Parse("cto.toml", []byte(good), known)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range bp.Order {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "analyze,build,report" {
		t.Fatalf("stage order %v (want file order)", names)
	}
	if bp.Perms["shell"] != Deny || len(bp.Declared) != 2 || bp.Order[0].Sandbox.Kind != "none" || *bp.Sandbox.Network {
		t.Fatalf("%+v", bp)
	}
	if bp.Order[1].MaxTurns != DefaultMaxTurns {
		t.Fatalf("max turns %d", bp.Order[1].MaxTurns)
	}
}

// TestParseStrict: every bad blueprint fails naming the key and its line, and nothing is
// returned.
func TestParseStrict(t *testing.T) {
	cases := []struct{ name string }{
		{"misspelled sandbox key"},
		{"misspelled stage sandbox key"},
		{"unknown top-level key"},
		{"bad permission"},
		{"bad sandbox kind"},
		{"bad on_violation"},
		{"bad clearance"},
		{"unknown tool in a stage"},
		{"wrong type"},
		{"catch-all read path"},
	}
	edits := map[string][2]string{
		"misspelled stage sandbox key": {"kind = \"none\"", "kind = \"none\"\nimage_name = \"x\""},
		"unknown top-level key":        {`version = "1.0.0"`, "version = \"1.0.0\"\nversoin = \"2\""},
		"bad permission":               {`shell = "deny"`, `shell = "never"`},
		"bad sandbox kind":             {`kind = "container"`, `kind = "vm"`},
		"bad on_violation":             {`on_violation = "deny"`, `on_violation = "block"`},
		"bad clearance":                {`clearances = { http_post = "public" }`, `clearances = { http_post = "secret" }`},
		"unknown tool in a stage":      {`tools = ["shell", "read_file"]`, `tools = ["shell", "rm_rf"]`},
		"wrong type":                   {`enabled = true`, `enabled = "yes"`},
		"catch-all read path":          {`allow = ["~/.leviath/runs", "glob:~/design-docs/**"]`, `allow = ["regex:.*"]`},
		"misspelled sandbox key":       {"network = false", "network = false\nnetwrok = false"},
	}
	wants := map[string]string{
		"misspelled sandbox key":       `cto.toml:10: unknown key "sandbox.netwrok"`,
		"misspelled stage sandbox key": `cto.toml:20: unknown key "stages.analyze.sandbox.image_name"`,
		"unknown top-level key":        `cto.toml:3: unknown key "versoin"`,
		"bad permission":               `cto.toml:4: key "tool_permissions.shell": bad permission "never"`,
		"bad sandbox kind":             `cto.toml:8: key "sandbox.kind": bad sandbox kind "vm"`,
		"bad on_violation":             `cto.toml:12: key "taint_tracking.on_violation"`,
		"bad clearance":                `cto.toml:13: key "taint_tracking.clearances.http_post": unknown sensitivity "secret"`,
		"unknown tool in a stage":      `cto.toml:21: key "stages.build.tools": unknown tool "rm_rf"`,
		"wrong type":                   `cto.toml:11: key "taint_tracking.enabled"`,
		"catch-all read path":          `cto.toml:6: key "read_paths.allow": entry 1: read path "regex:.*"`,
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ed := edits[tc.name]
			if !strings.Contains(good, ed[0]) {
				t.Fatalf("edit anchor %q not in blueprint", ed[0])
			}
			bad := strings.Replace(good, ed[0], ed[1], 1)
			bp, err := Parse("cto.toml", []byte(bad), known)
			if err == nil || bp != nil {
				t.Fatalf("accepted: %v", bp)
			}
			if !strings.Contains(err.Error(), wants[tc.name]) {
				t.Fatalf("err = %v\nwant %s", err, wants[tc.name])
			}
		})
	}
}
