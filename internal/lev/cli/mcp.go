package cli

import (
	"encoding/json"
	"fmt"
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
// current directory, as a run's would be.
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

func newMCPListCmd() *cobra.Command {
	var asJSON, noStart bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List config.toml's MCP servers: transport, classification, which agents may use them; started (as a run would start them) to list their tools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			var x runner.MaskedExecutor
			var wd string
			if !noStart {
				if x, wd, err = mcpSandbox(cfg); err != nil {
					return err
				}
				defer x.Close()
			}
			var out []mcpServerInfo
			for _, name := range cfg.MCPServerNames() {
				s := cfg.MCP.Servers[name]
				info := describeServer(s)
				if !noStart {
					start := time.Now()
					sess, tools, err := mcprun.Connect(cmd.Context(), s, mcprun.Env{Config: cfg, Workdir: wd, Exec: x})
					info.StartMS = float64(time.Since(start).Microseconds()) / 1000
					if err != nil {
						info.State, info.Error = mcpFailed, err.Error()
					} else {
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
				}
				out = append(out, info)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if out == nil {
					out = []mcpServerInfo{}
				}
				return json.NewEncoder(w).Encode(out)
			}
			if len(out) == 0 {
				fmt.Fprintln(w, "no MCP servers in config.toml (add [mcp.servers.NAME] tables)")
				return nil
			}
			for _, s := range out {
				fmt.Fprintf(w, "%s (%s: %s)\n", s.Name, s.Transport, s.Target)
				cl := s.Classification
				if s.Clearance != "" {
					cl += ", clearance " + s.Clearance
				}
				fmt.Fprintf(w, "  classification: %s\n  agents: %s\n  state: %s", cl, s.AgentsText, s.State)
				if s.Error != "" {
					fmt.Fprintf(w, ": %s", s.Error)
				}
				if s.StartMS > 0 {
					fmt.Fprintf(w, " (%.0f ms)", s.StartMS)
				}
				fmt.Fprintln(w)
				if len(s.Tools) > 0 {
					fmt.Fprintf(w, "  tools: %s\n", strings.Join(s.Tools, ", "))
				}
				for _, r := range s.Refused {
					fmt.Fprintf(w, "  refused: %s\n", r)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.Flags().BoolVar(&noStart, "no-start", false, "do not start the servers (no state, no tools)")
	return cmd
}
