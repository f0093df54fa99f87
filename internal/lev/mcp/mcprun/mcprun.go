// Package mcprun gives a run the tools of its MCP servers: it starts every server the
// blueprint declares and the user's config grants (declaring is not granting), lists its
// tools, and makes each a pipeline tool named mcp__SERVER__TOOL, which then passes the
// same steps as a built-in (offer and strict decode, permission, fence, taint gate,
// execution under a deadline, observe). A stdio server is started through the run's
// executor, so it runs in the run's sandbox with lev's state masked, like a shell command,
// but in "/" (ServerDir), never in the workdir the agent writes.
//
// It owns the step from a granted server to pipeline tools. It must not offer a tool
// outside the pipeline, nor start a server the user's config does not grant.
package mcprun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/mcp"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/toolcat"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// Env is what starting a run's servers needs.
type Env struct {
	Config    *levconfig.Config
	Blueprint *blueprint.Blueprint
	Workdir   string // real
	// Exec starts stdio servers (the run's sandbox); nil: stdio servers are refused.
	Exec pipeline.ProcessStarter
	// Stage carries the sandbox settings a stdio server runs under (the agent's).
	Stage pipeline.Stage
	// OnRequest hears of every server-initiated request (for the run's audit) before it
	// is answered or refused; an error refuses it and drops the server's session
	// (mcp.Options.OnServerRequest).
	OnRequest func(mcp.Request) error
	// OnDrop hears, once per server, why its session was dropped for what it sent unasked
	// (mcp.Options.OnDrop): a limit on its requests, or one that could not be recorded.
	OnDrop func(error)
}

// Status is one declared server in the run's record.
type Status struct {
	Server    string   `json:"server"`
	Transport string   `json:"transport,omitempty"`
	Granted   bool     `json:"granted"`
	Why       string   `json:"why"`
	Started   bool     `json:"started"`
	Tools     []string `json:"tools,omitempty"`
	// Refused are the server's tools lev does not offer, each with why.
	Refused []string `json:"refused,omitempty"`
	Error   string   `json:"error,omitempty"`
	StartMS float64  `json:"start_ms,omitempty"`
}

// Servers are a run's started servers and their tools.
type Servers struct {
	Status   []Status
	Tools    map[string]*pipeline.Tool
	sessions []*mcp.Session
	once     sync.Once
}

// DefaultTimeout bounds a server's start and each call when its table sets none.
const DefaultTimeout = 30 * time.Second

// Timeout is the server's configured deadline.
func Timeout(s *levconfig.MCPServer) time.Duration {
	if s.TimeoutSeconds > 0 {
		return time.Duration(s.TimeoutSeconds) * time.Second
	}
	return DefaultTimeout
}

// Class is how the pipeline records a server's tools: outbound unless the user classified
// the server local.
func Class(s *levconfig.MCPServer) toolcat.Class {
	if s.Classification == "local" {
		return toolcat.Local
	}
	return toolcat.Outbound
}

// Start starts the granted servers. A server that fails to start (or lists tools lev
// refuses) is recorded with its error and offers nothing; the run goes on without it.
func Start(ctx context.Context, env Env) *Servers {
	s := &Servers{Tools: map[string]*pipeline.Tool{}}
	bp := env.Blueprint
	for _, st := range env.Config.ResolveMCP(bp.MCP.Servers, bp.Installed, bp.Foreign) {
		rec := Status{Server: st.Server, Granted: st.Granted, Why: st.Why}
		if st.Config != nil {
			rec.Transport = st.Config.Transport()
		}
		if st.Granted {
			start := time.Now()
			sess, tools, err := Connect(ctx, st.Config, env)
			rec.StartMS = float64(time.Since(start).Microseconds()) / 1000
			if err != nil {
				rec.Error = err.Error()
			} else {
				rec.Started = true
				s.sessions = append(s.sessions, sess)
				for _, t := range tools {
					pt, err := Tool(sess, st.Config, t)
					if err != nil {
						rec.Refused = append(rec.Refused, err.Error())
						continue
					}
					s.Tools[pt.Name] = pt
					rec.Tools = append(rec.Tools, pt.Name)
				}
			}
		}
		s.Status = append(s.Status, rec)
	}
	return s
}

// Connect starts one configured server and lists its tools.
func Connect(ctx context.Context, cfg *levconfig.MCPServer, env Env) (*mcp.Session, []mcp.Tool, error) {
	srv := mcp.Server{Name: cfg.Name, URL: cfg.URL, Headers: cfg.Headers, SSE: cfg.SSE()}
	opts := mcp.Options{Timeout: Timeout(cfg), OnServerRequest: env.OnRequest, OnDrop: env.OnDrop}
	if cfg.Stdio() {
		if env.Exec == nil {
			return nil, nil, fmt.Errorf("MCP server %s: no sandbox to start a stdio server in", cfg.Name)
		}
		srv.Command, srv.Args, srv.Dir = cfg.Command, cfg.Args, ServerDir
		srv.Env = serverEnv(cfg.Env)
		opts.Spawn = spawner(env)
	}
	if cfg.Roots && env.Workdir != "" {
		opts.Roots = []string{(&url.URL{Scheme: "file", Path: env.Workdir}).String()}
	}
	sess, err := mcp.Connect(ctx, srv, opts)
	if err != nil {
		return nil, nil, err
	}
	tools, err := sess.Tools(ctx)
	if err != nil {
		sess.Close()
		return nil, nil, err
	}
	return sess, tools, nil
}

// ServerDir is the working directory of every stdio server, whatever the run's workdir
// (or, for lev mcp, the caller's directory). Never the workdir: the agent writes there
// (write_file is allowed by default), and a launcher that resolves code from its current
// directory would run the agent's files at the server's start, outside every tool
// permission and with the server's env secrets: `python3 -m NAME` imports ./NAME.py first,
// `npx PKG` prefers ./node_modules. "/" exists in every sandbox kind and the agent cannot
// write it: on the host and in a namespace it is root's while the agent runs as lev's
// user (a namespace's root is that user mapped), and the workbench's root filesystem is
// read-only. Where the agent is root after all (lev itself run as root with kind none or
// namespace, a container whose image runs as root) it could write "/", but just as well
// every directory the server's code comes from: the working directory gives it nothing
// more. The workdir reaches a server only as its root (roots = true).
const ServerDir = "/"

// serverEnv is a stdio server's whole environment: its env table, sorted, with
// PYTHONSAFEPATH=1 unless the table sets PYTHONSAFEPATH itself. Python (3.11 and later)
// then puts neither the current directory (python -m, -c) nor a script's directory at
// the front of sys.path, so no file beside the server's start can stand in for a module
// it imports, whatever a future working directory holds.
func serverEnv(table map[string]string) []string {
	var env []string
	for _, k := range sortedKeys(table) {
		env = append(env, k+"="+table[k])
	}
	if _, ok := table["PYTHONSAFEPATH"]; !ok {
		env = append(env, "PYTHONSAFEPATH=1")
	}
	return env
}

// spawner starts a stdio server through the run's executor (its sandbox).
func spawner(env Env) mcp.Spawner {
	return func(argv, penv []string, dir string, stdin, stdout, stderr *os.File) (mcp.Process, error) {
		return env.Exec.StartProcess(context.Background(), pipeline.ProcessRequest{Argv: argv, Env: penv, Dir: dir,
			Stage: env.Stage, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	}
}

// Tool makes one server tool a pipeline tool named mcp__SERVER__TOOL.
func Tool(sess *mcp.Session, cfg *levconfig.MCPServer, t mcp.Tool) (*pipeline.Tool, error) {
	name := toolnames.MCPName(cfg.Name, t.Name)
	if t.Refused != "" {
		// Over a cap on what lev takes from tools/list (mcp.MaxToolDescription,
		// mcp.MaxToolSchema): recorded as refused, with why, like the case below.
		return nil, errors.New(t.Refused)
	}
	if toolcat.Known(t.Name) {
		// Offered as mcp__SERVER__NAME it would shadow nothing, but a tool named like a
		// built-in is there to be taken for it (by the model, or by a person reading a
		// prompt): it is not offered. (The reference filesystem server still lists a
		// deprecated read_file beside read_text_file.)
		return nil, fmt.Errorf("MCP server %s offers a tool named %q, the name of a lev built-in tool: not offered", cfg.Name, t.Name)
	}
	if err := toolnames.Check(name); err != nil {
		return nil, err
	}
	schema := t.InputSchema
	if len(schema) == 0 || string(schema) == "null" {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	desc := t.Description
	if len(desc) > 4096 {
		// Cut on a character boundary (the description is valid UTF-8, as JSON decoding
		// leaves it): dropping what is left of a character cut in two.
		desc = strings.ToValidUTF8(desc[:4096], "") + "…"
	}
	// The pipeline's deadline is the session's own plus a moment, so the session's
	// message (naming the server) is the one the model and the record see.
	deadline := Timeout(cfg) + 5*time.Second
	return pipeline.NewExternalTool(name, fmt.Sprintf("[MCP server %s] %s", cfg.Name, desc), Class(cfg), schema, deadline,
		func(ctx context.Context, args pipeline.ObjectArgs) (*pipeline.Result, error) {
			raw, err := json.Marshal(args)
			if err != nil {
				return nil, err
			}
			res, err := sess.Call(ctx, t.Name, raw)
			if err != nil {
				// Carries the server's own error message: NewExternalTool caps it for
				// the model, as it caps the result below.
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return &pipeline.Result{Content: res.Text, IsError: res.IsError}, nil
		})
}

// Close ends every session (stdio servers are killed if they linger).
func (s *Servers) Close() error {
	if s == nil {
		return nil
	}
	s.once.Do(func() {
		for _, sess := range s.sessions {
			sess.Close()
		}
	})
	return nil
}

func sortedKeys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// Describe is a one-line summary of a status, for logs and lev validate.
func (st Status) Describe() string {
	switch {
	case !st.Granted:
		return "not granted: " + st.Why
	case st.Error != "":
		return "failed: " + st.Error
	}
	return fmt.Sprintf("started (%s), %d tools: %s", st.Transport, len(st.Tools), strings.Join(st.Tools, ", "))
}
