package toolcat

import (
	"slices"
	"testing"
)

// TestGatingIsTheSpecs: the spec's table of which built-in tools the taint gate checks.
// Gated: web_search, web_fetch, the HTTP tools, shell and submit_output (its answer leaves
// the machine); not gated: the file, search, context, todo, sub-agent and interaction
// tools. Any other tool (MCP, scripts) has no row and fails closed in package taint.
func TestGatingIsTheSpecs(t *testing.T) {
	gated := []string{"http_get", "http_post", "shell", "submit_output", "web_fetch", "web_search"}
	notGated := map[Class][]string{
		Read:        {"glob", "grep", "list_dir", "read_file", "read_files"},
		Write:       {"edit_file", "install_tool", "write_file"},
		State:       {"context_drop", "context_list", "todo_read", "todo_write"},
		SubAgent:    {"spawn_agent"},
		Interaction: {"ask_operator"},
	}
	var got []string
	for _, r := range Tools() {
		if r.Gated() {
			got = append(got, r.Name)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, gated) {
		t.Errorf("gated tools %v, the spec says %v", got, gated)
	}
	for class, names := range notGated {
		for _, n := range names {
			r, ok := Lookup(n)
			if !ok || r.Class != class || r.Gated() {
				t.Errorf("%s: row %+v (found %v), want class %s, not gated", n, r, ok, class)
			}
		}
	}
	all := slices.Clone(gated)
	for _, names := range notGated {
		all = append(all, names...)
	}
	slices.Sort(all)
	if !slices.Equal(Names(), all) {
		t.Errorf("the catalogue holds %v; the spec's table covers %v", Names(), all)
	}
}

// TestColumnsAgree: the columns that only mean something for some classes hold nothing
// elsewhere: a target only for a gated tool, web labels and pre-allowing only for the
// network tools, the sandbox only for the shell, and every outbound tool asks.
func TestColumnsAgree(t *testing.T) {
	for _, r := range Tools() {
		if r.Target != TargetArgs && !r.Gated() {
			t.Errorf("%s: target %q on a tool the gate does not check", r.Name, r.Target)
		}
		if (r.Label == LabelWeb || r.PreAllowable) && r.Class != Outbound {
			t.Errorf("%s: %+v: web label or pre-allowable on a tool that reaches no network", r.Name, r)
		}
		if r.Sandbox != (r.Name == "shell") {
			t.Errorf("%s: sandbox %v", r.Name, r.Sandbox)
		}
		if r.Class == Outbound && r.Permission != Ask {
			t.Errorf("%s: outbound and %s by default", r.Name, r.Permission)
		}
		if r.Permission != Allow && r.Permission != Ask {
			t.Errorf("%s: default permission %q", r.Name, r.Permission)
		}
	}
}

// TestToolsIsACopy: a caller cannot change the catalogue through what Tools returns.
func TestToolsIsACopy(t *testing.T) {
	ts := Tools()
	ts[0].Class, ts[0].Caps[0] = Outbound, "changed"
	if r, _ := Lookup(ts[0].Name); r.Class == Outbound || r.Caps[0] == "changed" {
		t.Errorf("row changed through Tools(): %+v", r)
	}
}
