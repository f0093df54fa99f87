package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
)

func newMCPCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "The MCP servers config.toml names: list them, test one",
	}
	cmd.AddCommand(newMCPListCmd(), newMCPTestCmd())
	return cmd
}

// mcpServerInfo is one line of lev mcp list (and its --json element).
type mcpServerInfo struct {
	Name           string   `json:"name"`
	Transport      string   `json:"transport"`
	Target         string   `json:"target"` // command line or URL
	Classification string   `json:"classification"`
	Clearance      string   `json:"clearance,omitempty"`
	Agents         []string `json:"agents"` // nil in JSON as null: every installed agent
	AgentsText     string   `json:"-"`
	State          mcpState `json:"state"`
	Error          string   `json:"error,omitempty"`
	Tools          []string `json:"tools,omitempty"`
	Refused        []string `json:"refused,omitempty"`
	StartMS        float64  `json:"start_ms,omitempty"`
}

// mcpState is what `lev mcp list` found of a server: started and listed its tools, failed
// to, or not asked (--no-start).
type mcpState string

const (
	mcpOK         mcpState = "ok"
	mcpFailed     mcpState = "failed"
	mcpNotStarted mcpState = "not started"
)

func describeServer(s *levconfig.MCPServer) mcpServerInfo {
	info := mcpServerInfo{Name: s.Name, Transport: s.Transport(), Classification: s.Classification, Clearance: s.Clearance, Agents: s.Agents, State: mcpNotStarted}
	if s.Stdio() {
		info.Target = strings.Join(append([]string{s.Command}, s.Args...), " ")
	} else {
		info.Target = s.URL
	}
	if info.Classification == "" {
		info.Classification = "unclassified (gated as outbound, public clearance)"
	}
	info.AgentsText = "every installed agent that declares it"
	if s.Agents != nil {
		info.AgentsText = strings.Join(s.Agents, ", ")
	}
	return info
}

// mcpSandbox is the executor lev mcp starts stdio servers in: the sandbox of config.toml's
// [sandbox] (no blueprint: nothing tightens it), lev's state masked as in a run in the
// current directory, as a run's would be. The current directory is the sandbox's workdir
// only: a server starts in mcprun.ServerDir, never in the directory the user happens to
// be in (a project whose files an agent wrote).
func mcpSandbox(cfg *levconfig.Config) (runner.MaskedExecutor, string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, "", err
	}
	if r, err := filepath.EvalSymlinks(wd); err == nil {
		wd = r
	}
	inner, err := sandboxexec.Factory(&pipeline.RunEnv{RunID: "lev-mcp", Workdir: wd, Config: cfg})
	if err != nil {
		return nil, "", fmt.Errorf("sandbox: %w", err)
	}
	eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(levconfig.Home(), "runs")}, AgentsDir: agentsDir()}
	x, err := eng.Masked(cfg, wd, inner)
	if err != nil {
		pipeline.Close(inner)
		return nil, "", err
	}
	return x, wd, nil
}

// mcpListOptions is `lev mcp list`.
type mcpListOptions struct {
	JSON, NoStart bool
}

func newMCPListCmd() *cobra.Command {
	opts := &mcpListOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List config.toml's MCP servers: transport, classification, which agents may use them; started (as a run would start them) to list their tools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMCPList(cmd.Context(), opts, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print a JSON array")
	cmd.Flags().BoolVar(&opts.NoStart, "no-start", false, "do not start the servers (no state, no tools)")
	return cmd
}

func runMCPList(ctx context.Context, opts *mcpListOptions, stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	var x runner.MaskedExecutor
	var wd string
	if !opts.NoStart {
		if x, wd, err = mcpSandbox(cfg); err != nil {
			return err
		}
		defer x.Close()
	}
	var out []mcpServerInfo
	for _, name := range cfg.MCPServerNames() {
		s := cfg.MCP.Servers[name]
		info := describeServer(s)
		if !opts.NoStart {
			probeServer(ctx, &info, s, mcprun.Env{Config: cfg, Workdir: wd, Exec: x})
		}
		out = append(out, info)
	}
	if opts.JSON {
		if out == nil {
			out = []mcpServerInfo{}
		}
		return writeJSON(stdout, out, false)
	}
	printServers(stdout, out)
	return nil
}

// probeServer starts s as a run would and records in info how that went and which of its
// tools a run would be offered.
func probeServer(ctx context.Context, info *mcpServerInfo, s *levconfig.MCPServer, env mcprun.Env) {
	start := time.Now()
	sess, tools, err := mcprun.Connect(ctx, s, env)
	info.StartMS = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		info.State, info.Error = mcpFailed, err.Error()
		return
	}
	info.State = mcpOK
	for _, t := range tools {
		if pt, err := mcprun.Tool(sess, s, t); err != nil {
			info.Refused = append(info.Refused, err.Error())
		} else {
			info.Tools = append(info.Tools, pt.Name)
		}
	}
	sess.Close()
}

// printServers is the text listing. A server's words (its error, with the end of its
// stderr; a refused tool's reason) and config.toml's alike are printed neutralised, each
// on its line (sayf).
func printServers(w io.Writer, out []mcpServerInfo) {
	if len(out) == 0 {
		fmt.Fprintln(w, "no MCP servers in config.toml (add [mcp.servers.NAME] tables)")
		return
	}
	for _, s := range out {
		sayf(w, "%s (%s: %s)\n", s.Name, s.Transport, s.Target)
		cl := s.Classification
		if s.Clearance != "" {
			cl += ", clearance " + s.Clearance
		}
		sayf(w, "  classification: %s\n  agents: %s\n  state: %s", cl, s.AgentsText, string(s.State))
		if s.Error != "" {
			sayf(w, ": %s", s.Error)
		}
		if s.StartMS > 0 {
			fmt.Fprintf(w, " (%.0f ms)", s.StartMS)
		}
		fmt.Fprintln(w)
		if len(s.Tools) > 0 {
			sayf(w, "  tools: %s\n", strings.Join(s.Tools, ", "))
		}
		for _, r := range s.Refused {
			sayf(w, "  refused: %s\n", r)
		}
	}
}
