package cli

// lev mcp test: one server started as a run would start it, and optionally one call
// through the pipeline a run would build.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/mcp"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// mcpTestOptions is `lev mcp test SERVER [TOOL --args JSON]`.
type mcpTestOptions struct {
	Server, Tool string
	// HasTool is set when a TOOL argument was given, even an empty one.
	HasTool bool
	Args    string
	// ArgsSet is set when --args was given, even as its default: without a TOOL it is an
	// error.
	ArgsSet           bool
	JSON, Allow, Yolo bool
}

func newMCPTestCmd() *cobra.Command {
	opts := &mcpTestOptions{}
	cmd := &cobra.Command{
		Use:   "test SERVER [TOOL --args JSON]",
		Short: "Start one configured server and list its tools; with TOOL, call it through the pipeline (permission, gate), printing each decision",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Server, opts.HasTool, opts.ArgsSet = args[0], len(args) == 2, cmd.Flags().Changed("args")
			if opts.HasTool {
				opts.Tool = args[1]
			}
			return runMCPTest(cmd.Context(), opts, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&opts.Args, "args", "{}", "the tool's arguments, a JSON object")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print a JSON report")
	cmd.Flags().BoolVar(&opts.Allow, "allow", false, "lift the tool's ask permission, as lev run --allow TOOL would (never a deny)")
	cmd.Flags().BoolVar(&opts.Yolo, "yolo", false, "run as lev run --yolo would: every ask allowed, the gate's AutoBlock waived and audited")
	return cmd
}

func runMCPTest(ctx context.Context, opts *mcpTestOptions, stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	s := cfg.MCP.Servers[opts.Server]
	if s == nil {
		return fmt.Errorf("config.toml has no [mcp.servers.%s] (lev mcp list shows the servers)", opts.Server)
	}
	if !opts.HasTool && opts.ArgsSet {
		return errors.New("--args needs a TOOL")
	}
	x, wd, err := mcpSandbox(cfg)
	if err != nil {
		return err
	}
	defer x.Close()
	rep := &mcpTestReport{Server: s.Name}
	// Every line carries the server's words (its errors, stderr, results): neutralised.
	say := func(format string, a ...any) {
		if !opts.JSON {
			sayf(stdout, format+"\n", a...)
		}
	}
	// The report says how far the test got, whichever way it ends.
	defer func() {
		if opts.JSON {
			writeJSON(stdout, rep, false)
		}
	}()
	var requests []mcp.Request
	start := time.Now()
	sess, tools, err := mcprun.Connect(ctx, s, mcprun.Env{Config: cfg, Workdir: wd, Exec: x,
		OnRequest: func(q mcp.Request) error { requests = append(requests, q); return nil }})
	rep.StartMS = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		rep.Error = err.Error()
		say("✗ %s: %v", s.Name, err)
		return exitcode.New(1, fmt.Errorf("MCP server %s failed", s.Name))
	}
	defer sess.Close()
	say("✓ %s started (%s) in %.0f ms", s.Name, s.Transport(), rep.StartMS)
	byName := map[string]*pipeline.Tool{}
	for _, t := range tools {
		pt, err := mcprun.Tool(sess, s, t)
		if err != nil {
			rep.Refused = append(rep.Refused, err.Error())
			say("  refused: %v", err)
			continue
		}
		byName[pt.Name] = pt
		rep.Tools = append(rep.Tools, pt.Name)
		say("  %s", pt.Name)
	}
	if !opts.HasTool {
		return nil
	}
	name := opts.Tool
	if !strings.HasPrefix(name, toolnames.MCPPrefix) {
		name = toolnames.MCPName(s.Name, name)
	}
	if byName[name] == nil {
		rep.Error = fmt.Sprintf("%s offers no tool %s", s.Name, name)
		say("✗ %s", rep.Error)
		return exitcode.New(1, errors.New(rep.Error))
	}
	call, res, err := mcpTestCall(ctx, cfg, wd, byName, name, opts.Args, opts.Allow, opts.Yolo)
	if err != nil {
		return err
	}
	rep.Call = &mcpTestCallReport{Tool: name, Args: call.ArgsJSON(), Permission: string(call.Permission), PermissionSource: call.PermissionSource,
		Gate: call.Gate, Refusal: res.Refusal, IsError: res.IsError, Result: res.Content}
	for _, q := range requests {
		rep.Requests = append(rep.Requests, q.Method)
	}
	if !opts.JSON {
		sayCall(say, name, call, res, requests)
	}
	if res.Refusal != nil || res.IsError {
		return exitcode.New(1, fmt.Errorf("%s did not succeed", name))
	}
	return nil
}

// sayCall is the readable account of the call: each decision on its way, then its outcome.
func sayCall(say func(string, ...any), name string, call *pipeline.Call, res *pipeline.Result, requests []mcp.Request) {
	say("call %s %s", name, call.ArgsJSON())
	if call.Permission != "" {
		say("  permission: %s (%s)", call.Permission, call.PermissionSource)
	}
	if call.Gate != nil {
		say("  gate: %s (%s)", map[bool]string{true: "allowed", false: "blocked"}[call.Gate.Allow], strings.TrimSpace(call.Gate.Source+" "+call.Gate.Reason))
	}
	for _, q := range requests {
		say("  server request %s: %s", q.Method, map[bool]string{true: "answered", false: "refused"}[q.Answered])
	}
	switch {
	case res.Refusal != nil:
		say("  refused at %s: %s", res.Refusal.Step, res.Refusal.Msg)
	case res.IsError:
		say("  error: %s", res.Content)
	default:
		say("  result: %s", res.Content)
	}
}

type mcpTestReport struct {
	Server   string             `json:"server"`
	StartMS  float64            `json:"start_ms"`
	Tools    []string           `json:"tools,omitempty"`
	Refused  []string           `json:"refused,omitempty"`
	Error    string             `json:"error,omitempty"`
	Call     *mcpTestCallReport `json:"call,omitempty"`
	Requests []string           `json:"server_requests,omitempty"`
}

type mcpTestCallReport struct {
	Tool             string             `json:"tool"`
	Args             json.RawMessage    `json:"args"`
	Permission       string             `json:"permission,omitempty"`
	PermissionSource string             `json:"permission_source,omitempty"`
	Gate             *pipeline.Decision `json:"gate,omitempty"`
	Refusal          *pipeline.Refusal  `json:"refusal,omitempty"`
	IsError          bool               `json:"is_error,omitempty"`
	Result           string             `json:"result"`
}

// mcpTestCall puts one call through the pipeline a run would build from config.toml (no
// blueprint: its permissions and taint settings are the user's), headless, with the run's
// taint gate writing its audit to a scratch directory.
func mcpTestCall(ctx context.Context, cfg *levconfig.Config, wd string, tools map[string]*pipeline.Tool, name, argsJSON string, allow, yolo bool) (*pipeline.Call, *pipeline.Result, error) {
	scratch, err := os.MkdirTemp("", "lev-mcp-test-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(scratch)
	gate, err := taintgate.New(&pipeline.RunEnv{RunID: "lev-mcp-test", Workdir: wd, RunDir: scratch, Config: cfg, Yolo: yolo})
	if err != nil {
		return nil, nil, fmt.Errorf("taint gate: %w", err)
	}
	p := &pipeline.Pipeline{Tools: tools, Gate: gate,
		Perms: &pipeline.Permissions{User: cfg.Perms, Yolo: yolo, Allow: map[string]bool{name: allow}}}
	st := pipeline.Stage{Name: "mcp-test", Tools: []string{name}, Dir: filepath.Join(scratch, "stages", "0")}
	os.MkdirAll(st.Dir, 0o700)
	c, res := p.Handle(ctx, st, provider.ToolCall{ID: "test-1", Name: name, Args: json.RawMessage(argsJSON)})
	return c, res, nil
}
