// Package toolcat is the catalogue of lev's built-in tools: one row per tool, saying what
// the tool touches (its class, from which its gating follows), its default permission,
// how the fence treats its paths, what the taint gate matches and how its result is
// labelled, whether it runs in the run's sandbox, and the caps that bound it. Every part
// of lev that treats tools differently by name reads this table (the pipeline's
// permissions and fence, the taint classification and labels, the policy's targets, the
// names [tool_permissions] accepts), so a tool is described once.
//
// It owns the facts about each built-in tool; it holds no behaviour. A tool's
// implementation (its argument type, schema and run function) is the pipeline's registry,
// and a test there keeps the two one-to-one: no row without a tool to dispatch to, no tool
// without its row. It must stay a leaf: taint, policy and the pipeline all import it.
package toolcat

import "sort"

// Class is what a tool touches: the one meaning of a tool's class in lev. The taint gate
// checks the classes that can carry bytes off the machine (Gated).
type Class string

const (
	// Read: file reads, some of which may leave the workdir through a [read_paths] grant.
	Read Class = "read"
	// Write: file writes, confined to the workdir.
	Write Class = "write"
	// Outbound: can send bytes off the machine (the shell, the network tools, an MCP
	// server nobody classified local).
	Outbound Class = "outbound"
	// Output: submit_output; the stage's answer is handed to whoever reads
	// GET /api/agents/{id}/result, so it leaves the machine too.
	Output Class = "output"
	// State: the run's own state (its todo list, its conversation's context), kept on the
	// machine and read and written by nothing but these tools.
	State Class = "state"
	// Interaction: talks to the person running the agent (ask_operator).
	Interaction Class = "interaction"
	// SubAgent: runs a child run within the parent's permissions (spawn_agent).
	SubAgent Class = "subagent"
	// Local: an MCP server the user classified as unable to send data off the machine. No
	// built-in has it.
	Local Class = "local"
)

// Gated reports whether the taint gate checks a call of this class against the
// context's label: only the classes that can carry bytes off the machine.
func (c Class) Gated() bool { return c == Outbound || c == Output }

// Permission is a tool's default permission, in [tool_permissions]' spelling.
type Permission string

const (
	Allow Permission = "allow"
	Ask   Permission = "ask"
)

// Fence is how the pipeline's fence step treats a tool's path arguments.
type Fence string

const (
	// NoPaths: the tool takes no path the fence resolves.
	NoPaths Fence = ""
	// Granted: reads resolve in the workdir or through a granted [read_paths] entry.
	Granted Fence = "granted"
	// Workdir: every path must resolve inside the workdir, whatever [read_paths] grants
	// (the search tools' reads, every write).
	Workdir Fence = "workdir"
)

// Target is what the taint policy matches a gated call against.
type Target string

const (
	// TargetArgs: read from the call's arguments as for a tool lev does not know (the
	// url, target, host, command or path argument, else the one URL it carries).
	TargetArgs Target = ""
	// TargetHost: the host of the url argument, matched lower-case.
	TargetHost Target = "host"
	// TargetQuery: the query argument.
	TargetQuery Target = "query"
	// TargetCommand: the command line.
	TargetCommand Target = "command"
	// TargetResult: the literal "result" (the stage's answer has no destination of its
	// own).
	TargetResult Target = "result"
)

// Label is how the runtime labels a tool's result when it enters the context.
type Label string

const (
	// LabelLocal: Internal, unless the read went through a grant (then Private).
	LabelLocal Label = ""
	// LabelFiles: file content or names: Private through a grant, and for an agent that
	// holds any grant; Internal otherwise.
	LabelFiles Label = "files"
	// LabelWeb: it came from outside: Public.
	LabelWeb Label = "web"
)

// Tool is one row of the catalogue.
type Tool struct {
	Name  string
	Class Class
	// Permission applies when neither config.toml nor the blueprint sets one.
	Permission Permission
	// PreAllowable: a blueprint may loosen this tool's permission when the user's config
	// sets neither pre-allowable tool (docs/lev.md, "Blueprints": the one narrow
	// exception).
	PreAllowable bool
	Fence        Fence
	Target       Target
	Label        Label
	// Sandbox: the tool runs a process in the run's sandbox, which sees (and may write)
	// every file the sandbox shows, whatever the fence says.
	Sandbox bool
	// Caps are the constants of the cap table (pipeline/caps.go, docs/lev.md "Tool caps")
	// that bound this tool's arguments, result or writes, beside MaxCallResultBytes, which
	// bounds every tool.
	Caps []string
}

// Gated reports whether the taint gate checks this tool's calls.
func (t Tool) Gated() bool { return t.Class.Gated() }

// The caps of the file tools' path arguments and of the walks, named once.
const (
	capPath    = "MaxPathBytes"
	capResult  = "MaxResultBytes"
	capRead    = "MaxReadBytes"
	capWrite   = "MaxWriteBytes"
	capPattern = "MaxPatternBytes"
	capWalk    = "MaxWalkEntries"
	capDepth   = "MaxWalkDepth"
)

// rows is the catalogue, one row per built-in tool.
var rows = []Tool{
	// File tools: reads may leave the workdir through a grant; writes never do.
	{Name: "read_file", Class: Read, Permission: Allow, Fence: Granted, Label: LabelFiles, Caps: []string{capRead, capPath}},
	{Name: "read_files", Class: Read, Permission: Allow, Fence: Granted, Label: LabelFiles, Caps: []string{capRead, capPath}},
	{Name: "list_dir", Class: Read, Permission: Allow, Fence: Granted, Label: LabelFiles, Caps: []string{capResult, "MaxListEntries", capPath}},
	{Name: "write_file", Class: Write, Permission: Allow, Fence: Workdir, Caps: []string{capWrite, capPath}},
	{Name: "edit_file", Class: Write, Permission: Allow, Fence: Workdir, Caps: []string{capWrite, capPath}},
	// install_tool writes a stamped script under the workdir's .lev/tools, which later
	// runs may execute: it asks.
	{Name: "install_tool", Class: Write, Permission: Ask, Fence: Workdir, Caps: []string{capWrite}},
	// Search tools: reads confined to the workdir, whatever [read_paths] grants.
	{Name: "glob", Class: Read, Permission: Allow, Fence: Workdir, Label: LabelFiles,
		Caps: []string{capWalk, capDepth, "MaxGlobResults", capResult, capPattern}},
	{Name: "grep", Class: Read, Permission: Allow, Fence: Workdir, Label: LabelFiles,
		Caps: []string{capWalk, capDepth, "MaxGrepMatches", "MaxGrepBytes", "MaxGrepLineBytes", capRead, capPattern}},
	// The run's own state: its todo list and its conversation.
	{Name: "todo_write", Class: State, Permission: Allow, Caps: []string{"MaxTodos", "MaxTodoItemBytes"}},
	{Name: "todo_read", Class: State, Permission: Allow},
	{Name: "context_list", Class: State, Permission: Allow},
	{Name: "context_drop", Class: State, Permission: Allow, Caps: []string{"MaxDropIDs"}},
	// Outbound: the shell (it reaches whatever the sandbox lets it) and the network tools.
	{Name: "shell", Class: Outbound, Permission: Ask, Target: TargetCommand, Sandbox: true, Caps: []string{capResult}},
	{Name: "web_search", Class: Outbound, Permission: Ask, PreAllowable: true, Target: TargetQuery, Label: LabelWeb},
	{Name: "web_fetch", Class: Outbound, Permission: Ask, PreAllowable: true, Target: TargetHost, Label: LabelWeb, Caps: []string{capResult}},
	{Name: "http_get", Class: Outbound, Permission: Ask, Target: TargetHost, Label: LabelWeb, Caps: []string{capResult}},
	{Name: "http_post", Class: Outbound, Permission: Ask, Target: TargetHost, Label: LabelWeb, Caps: []string{capResult}},
	// The stage's answer leaves the machine.
	{Name: "submit_output", Class: Output, Permission: Allow, Target: TargetResult, Caps: []string{"MaxOutputBytes"}},
	// Asking the operator and running a sub-agent within the parent's own permissions
	// reach nothing new.
	{Name: "ask_operator", Class: Interaction, Permission: Allow},
	{Name: "spawn_agent", Class: SubAgent, Permission: Allow},
}

// byName indexes rows; built once, a name twice is a programming error.
var byName = func() map[string]*Tool {
	m := make(map[string]*Tool, len(rows))
	for i := range rows {
		if m[rows[i].Name] != nil {
			panic("toolcat: tool " + rows[i].Name + " has two rows")
		}
		m[rows[i].Name] = &rows[i]
	}
	return m
}()

// Lookup returns a built-in tool's row.
func Lookup(name string) (Tool, bool) {
	t := byName[name]
	if t == nil {
		return Tool{}, false
	}
	return *t, true
}

// Known reports whether name is a built-in tool.
func Known(name string) bool { return byName[name] != nil }

// Tools returns every row, in the catalogue's order. The slice is the caller's.
func Tools() []Tool {
	out := make([]Tool, len(rows))
	copy(out, rows)
	for i := range out {
		out[i].Caps = append([]string(nil), rows[i].Caps...)
	}
	return out
}

// Names returns the built-in tools' names, sorted.
func Names() []string {
	out := make([]string, 0, len(rows))
	for _, t := range rows {
		out = append(out, t.Name)
	}
	sort.Strings(out)
	return out
}
