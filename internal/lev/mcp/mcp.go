// Package mcp is lev's client for MCP servers (stdio and Streamable HTTP), built on the
// official Go SDK. It adds what the SDK leaves to its caller: every byte read from a server
// passes lev's fixed caps (capread), every call has a deadline, server-initiated requests
// are refused and reported, a stdio server gets only the environment it is given, and tool
// names are checked so that mcp__SERVER__TOOL stays unambiguous.
//
// It must not decide what an agent may do: internal/lev/mcp/mcprun offers its tools to
// agents through the pipeline (permission, fence, taint gate, sandbox; docs/mcp.md).
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// Server names one MCP server: Command (with Args, Env, Dir) for a stdio server, or URL
// (with Headers, and SSE) for an HTTP server; exactly one of the two.
type Server struct {
	Name    string
	Command string
	Args    []string
	// Env is the child's whole environment ("KEY=value"). Nothing is inherited from lev's
	// process (no LEV_TOKEN, no provider keys, not even PATH): nil means an empty
	// environment. A server started through a "#!/usr/bin/env node" script needs PATH here.
	Env     []string
	Dir     string
	URL     string
	Headers map[string]string
	// SSE selects the older HTTP+SSE transport (protocol 2024-11-05: a GET event stream
	// whose first event announces the URL to POST messages to) instead of Streamable HTTP,
	// for a server that offers only that. The announced URL must have URL's origin.
	SSE bool
}

// Request is a request the server sent to the client (sampling, elicitation, roots/list,
// or anything else but ping). lev refuses every one; OnServerRequest hears of each.
type Request struct {
	Server string
	Method string
	Params json.RawMessage // as the server sent them, for the audit
	// Answered: the request was configured (roots/list with roots = true) and answered;
	// false: refused.
	Answered bool
}

// Options tune a session. The zero value is usable.
type Options struct {
	// Timeout bounds Connect (start and handshake) and each call. Default 30s.
	Timeout time.Duration
	// OnServerRequest is told of every server-initiated request before it is refused (or,
	// for roots/list with Roots set, answered), so it can record it. An error (the record
	// could not be written) fails closed: the request is refused whatever it is, and the
	// session is dropped for good, every later call failing with that error; a request
	// lev cannot account for is neither answered nor followed by more of the server's
	// work. It runs on the session's reader: it must not block.
	OnServerRequest func(Request) error
	// Spawn starts a stdio server; nil runs it directly, in a process group of its own.
	// lev's runs pass the run's sandbox here, so a server runs like a shell command would.
	Spawn Spawner
	// Roots, when set, are the file:// roots lev advertises and answers roots/list with
	// (the run's workdir, when the user's config sets roots = true). Empty: roots are not
	// advertised and roots/list is refused like sampling and elicitation.
	Roots []string
	// OnDrop is told, once, why the session was dropped for something the server sent
	// unasked (a request that could not be recorded, a limit of limits.go), so the run can
	// say so. It runs on the session's reader: it must not block.
	OnDrop func(error)
}

// Process is a started stdio server.
type Process interface {
	// Wait blocks until the server exited.
	Wait() error
	// Kill kills it and everything it started.
	Kill()
}

// Spawner starts argv with exactly env (nothing inherited) in dir, its standard streams
// the given files (the caller closes its copies once Spawn returned).
type Spawner func(argv, env []string, dir string, stdin, stdout, stderr *os.File) (Process, error)

// DefaultTimeout is the deadline of a call when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// MaxTools bounds how many tools one server may list (across pages): a server that pages
// forever is cut off rather than followed until the deadline.
const MaxTools = 1000

// Caps on what lev takes from a server's tools/list, beside the transport's caps (which
// bound one reply, not a list paged over many, nor what lev keeps of it). A tool's
// description and input schema are kept for the session's life and handed to the model
// with every request of the run, so a server must not make them as large as a transport
// reply (64 MiB over HTTP, for each of up to MaxTools tools). Real servers stay far below:
// server-everything and server-filesystem list descriptions of at most 457 bytes and
// schemas of at most 648 bytes, 7 KiB in all.
const (
	// MaxToolDescription bounds one tool's description (bytes); a tool over it is listed
	// with Refused set, and a run does not offer it.
	MaxToolDescription = 64 << 10
	// MaxToolSchema bounds one tool's input schema as JSON (bytes); as for a description.
	MaxToolSchema = 256 << 10
	// MaxToolsBytes bounds a server's whole list as lev keeps it: the names, descriptions
	// and input schemas of the tools it offers. A server over it fails Tools, offering
	// nothing, as one listing more than MaxTools tools does.
	MaxToolsBytes = 8 << 20
)

// Tool is one tool a server offers.
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	// Refused says why lev does not offer the tool (its description or input schema is
	// over a cap); Description and InputSchema are then not kept.
	Refused string
}

// Result is a tool call's outcome: its text content joined by newlines (other content
// kinds are named, not inlined), and whether the server flagged it as an error.
type Result struct {
	Text    string
	IsError bool
}

// Session is a connected, initialized server.
type Session struct {
	name    string
	timeout time.Duration
	cs      *sdk.ClientSession
	fault   *fault
	closer  func() error  // transport cleanup after the SDK session closed (child, conns)
	diag    func() string // what the transport knows of a failure (a stdio child's exit)
	once    sync.Once
	err     error

	// dropped ends every call in flight when drop does (a server request that could not
	// be recorded); drop's error is in fault by then.
	dropped    context.Context
	dropCancel context.CancelFunc
	onDrop     func(error)
	dropOnce   sync.Once
}

// toolNameRe is the brief's [A-Za-z0-9_-]{1,64}, with a letter or digit first so every
// accepted tool also passes toolnames.Check as mcp__SERVER__TOOL (its TOOL starts with one).
var toolNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// CheckServerName refuses a server name that would make mcp__SERVER__TOOL ambiguous.
func CheckServerName(name string) error { return toolnames.CheckServer(name) }

// CheckToolName refuses a tool name outside [A-Za-z0-9][A-Za-z0-9_-]{0,63}.
func CheckToolName(server, tool string) error {
	if !toolNameRe.MatchString(tool) {
		return fmt.Errorf("MCP server %s offers a tool named %q: tool names are 1-64 letters, digits, _ and - (a letter or digit first)", server, tool)
	}
	return nil
}

// DeadlineError is a call the server did not answer in time.
type DeadlineError struct {
	Server, Op string
	Timeout    time.Duration
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("MCP server %s did not answer %s within %s", e.Server, e.Op, e.Timeout)
}

// fault holds the first transport failure that drops the connection (a cap): calls that
// fail afterwards report it instead of the SDK's generic "connection closed".
type fault struct {
	mu  sync.Mutex
	err error
}

func (f *fault) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *fault) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// peer is how cap messages name a server: "line exceeded 1 MiB from the MCP server NAME".
func peer(name string) string { return "the MCP server " + name }

func capErr(what string, limit int64, name string) error {
	return &capread.CapError{What: what, Cap: limit, Peer: peer(name)}
}

// Connect starts (stdio) or reaches (HTTP) the server and runs the MCP handshake, all
// within opts.Timeout.
func Connect(ctx context.Context, srv Server, opts Options) (*Session, error) {
	if err := CheckServerName(srv.Name); err != nil {
		return nil, err
	}
	if (srv.Command == "") == (srv.URL == "") {
		return nil, fmt.Errorf("MCP server %s: set exactly one of command (stdio) or url (HTTP)", srv.Name)
	}
	if srv.SSE && srv.Command != "" {
		return nil, fmt.Errorf("MCP server %s: the HTTP+SSE transport is for a url, not a stdio command", srv.Name)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := &Session{name: srv.Name, timeout: timeout, fault: &fault{}}
	s.dropped, s.dropCancel = context.WithCancel(context.Background())

	var transport sdk.Transport
	if srv.Command != "" {
		st, err := startStdio(srv, s.fault, opts.Spawn, timeout)
		if err != nil {
			return nil, err
		}
		transport, s.closer, s.diag = st, st.close, st.diag
	} else {
		ht, err := newHTTP(srv, s.fault)
		if err != nil {
			return nil, err
		}
		transport, s.closer = ht, ht.close
	}

	caps := &sdk.ClientCapabilities{}
	if len(opts.Roots) > 0 {
		// roots = true in config.toml asks for this; the SDK marks roots deprecated (SEP-2577)
		// but keeps them working, and a server written against them still asks.
		//lint:ignore SA1019 config.toml's roots = true is the user's choice (docs/mcp.md)
		caps.RootsV2 = &sdk.RootCapabilities{}
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "lev", Version: "1"}, &sdk.ClientOptions{
		// Empty, not nil: nil would advertise roots. No handler is set, so no sampling or
		// elicitation capability is inferred either.
		Capabilities: caps,
		// The multi-round-trip helper would answer a tool result's embedded input requests
		// (elicitation, sampling) by itself; Call refuses those instead.
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
	})
	for _, r := range opts.Roots {
		//lint:ignore SA1019 see RootsV2 above
		client.AddRoots(&sdk.Root{URI: r})
	}
	s.onDrop = opts.OnDrop
	client.AddReceivingMiddleware(refuseServerRequests(srv.Name, len(opts.Roots) > 0, opts.OnServerRequest, s.drop, newInbound(srv.Name)))

	cctx, cancel := withDeadline(ctx, srv.Name, "initialize", timeout)
	defer cancel()
	cs, err := client.Connect(cctx, transport, nil)
	if err != nil {
		err = s.explain(cctx, "connecting", err)
		s.closer()
		s.dropCancel()
		return nil, err
	}
	if f := s.fault.get(); f != nil {
		// Dropped during the handshake (a request it could not record): no session.
		cs.Close()
		s.closer()
		s.dropCancel()
		return nil, fmt.Errorf("connecting: %w", f)
	}
	if st, ok := transport.(*stdioTransport); ok {
		st.ready.Store(true)
	}
	s.cs = cs
	return s, nil
}

// refuseServerRequests answers every server-to-client request but ping with an error and
// reports it. Notifications (progress, logging, list changes, cancellation) pass: they ask
// nothing of lev. A request the report cannot record is refused and drops the session.
// Every message the server sends unasked is first counted against the limits of
// limits.go: one over them drops the session and is refused, unrecorded.
func refuseServerRequests(server string, roots bool, report func(Request) error, drop func(error), in *inbound) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			method = cutMethod(method)
			notification := strings.HasPrefix(method, "notifications/")
			if err := in.admit(method, notification); err != nil {
				drop(err)
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "lev dropped this session: " + err.Error()}
			}
			if method == "ping" || notification {
				return next(ctx, method, req)
			}
			if report != nil {
				var params json.RawMessage
				if p := req.GetParams(); p != nil {
					params, _ = json.Marshal(p)
				}
				if err := report(Request{Server: server, Method: method, Params: params, Answered: roots && method == "roots/list"}); err != nil {
					drop(fmt.Errorf("MCP server %s: session dropped: its %s request could not be recorded: %w", server, method, err))
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("lev refuses %s requests from MCP servers: it could not record this one", method)}
				}
			}
			if roots && method == "roots/list" {
				// Configured (roots = true): the SDK answers with the roots lev added.
				return next(ctx, method, req)
			}
			// Not -32601: the SDK rewrites that code's message to a bare "method not
			// found", and the server (and whoever reads its logs) should see why.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("lev refuses %s requests from MCP servers", method)}
		}
	}
}

// maxMethod bounds a server-sent method name as lev records and reports it.
const maxMethod = 128

// cutMethod is a method name cut to maxMethod bytes (on a character boundary): a server
// picks it, and it is written to the run's record and the daemon's log.
func cutMethod(m string) string {
	if len(m) <= maxMethod {
		return m
	}
	return strings.ToValidUTF8(m[:maxMethod], "") + "…"
}

func withDeadline(ctx context.Context, server, op string, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, &DeadlineError{Server: server, Op: op, Timeout: d})
}

// explain turns a failed SDK call into lev's error: a cap that dropped the connection
// first, then our own deadline, then the SDK's error with the server named.
func (s *Session) explain(ctx context.Context, op string, err error) error {
	if f := s.fault.get(); f != nil {
		s.Close()
		return fmt.Errorf("%s: %w", op, f)
	}
	var de *DeadlineError
	if cause := context.Cause(ctx); errors.As(cause, &de) {
		return de
	}
	if s.diag != nil {
		if d := s.diag(); d != "" {
			return fmt.Errorf("MCP server %s: %s: %w (%s)", s.name, op, err, d)
		}
	}
	return fmt.Errorf("MCP server %s: %s: %w", s.name, op, err)
}

// drop ends the session for good: err becomes its fault (every later call fails with
// it), the calls in flight end now, and the transport closes (a stdio child is killed) on
// a goroutine of its own, as drop runs on the session's reader.
func (s *Session) drop(err error) {
	s.fault.set(err)
	s.dropCancel()
	go s.closer()
	s.dropOnce.Do(func() {
		if s.onDrop != nil {
			s.onDrop(s.fault.get())
		}
	})
}

// callContext is a call's context: its deadline, and ended early by a drop.
func (s *Session) callContext(ctx context.Context, op string) (context.Context, context.CancelFunc) {
	cctx, cancel := withDeadline(ctx, s.name, op, s.timeout)
	stop := context.AfterFunc(s.dropped, cancel)
	return cctx, func() { stop(); cancel() }
}

// Name is the server's configured name.
func (s *Session) Name() string { return s.name }

// Tools lists the server's tools (all pages, at most MaxTools). A tool whose name is not
// [A-Za-z0-9][A-Za-z0-9_-]{0,63}, or that is listed twice, fails the whole list: a server
// that names tools ambiguously is not offered at all. So does a list over MaxToolsBytes.
// A tool whose description or input schema is over its cap is listed with Refused set
// (the rest of the server's tools stay usable), like a tool named as a built-in is
// refused by mcprun.
func (s *Session) Tools(ctx context.Context) ([]Tool, error) {
	if f := s.fault.get(); f != nil {
		return nil, fmt.Errorf("listing tools: %w", f)
	}
	cctx, cancel := s.callContext(ctx, "tools/list")
	defer cancel()
	var tools []Tool
	seen := map[string]bool{}
	kept := 0 // bytes of names, descriptions and schemas kept, against MaxToolsBytes
	for t, err := range s.cs.Tools(cctx, nil) {
		if err != nil {
			return nil, s.explain(cctx, "listing tools", err)
		}
		if err := CheckToolName(s.name, t.Name); err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("MCP server %s lists the tool %q twice", s.name, t.Name)
		}
		seen[t.Name] = true
		if len(tools) == MaxTools {
			return nil, fmt.Errorf("MCP server %s lists more than %d tools", s.name, MaxTools)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("MCP server %s: tool %s: input schema: %w", s.name, t.Name, err)
		}
		switch {
		case len(t.Description) > MaxToolDescription:
			tools = append(tools, Tool{Name: t.Name, Refused: fmt.Sprintf("MCP server %s offers the tool %q with a description of %d bytes, over lev's cap of %s on a tool's description: not offered",
				s.name, t.Name, len(t.Description), capread.Size(MaxToolDescription))})
			continue
		case len(schema) > MaxToolSchema:
			tools = append(tools, Tool{Name: t.Name, Refused: fmt.Sprintf("MCP server %s offers the tool %q with an input schema of %d bytes (as JSON), over lev's cap of %s on a tool's input schema: not offered",
				s.name, t.Name, len(schema), capread.Size(MaxToolSchema))})
			continue
		}
		kept += len(t.Name) + len(t.Description) + len(schema)
		if kept > MaxToolsBytes {
			return nil, fmt.Errorf("MCP server %s lists more than %s of tools (names, descriptions and input schemas, lev's cap on one server's list; passed at the tool %q): it offers nothing",
				s.name, capread.Size(MaxToolsBytes), t.Name)
		}
		tools = append(tools, Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if f := s.fault.get(); f != nil {
		// Dropped while listing: a list that raced in is not taken.
		return nil, fmt.Errorf("listing tools: %w", f)
	}
	return tools, nil
}

// Call calls one tool with a JSON object of arguments (nil or empty: {}).
func (s *Session) Call(ctx context.Context, tool string, args json.RawMessage) (Result, error) {
	if err := CheckToolName(s.name, tool); err != nil {
		return Result{}, err
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return Result{}, fmt.Errorf("MCP server %s: tool %s: arguments must be a JSON object", s.name, tool)
	}
	if f := s.fault.get(); f != nil {
		return Result{}, fmt.Errorf("calling %s: %w", tool, f)
	}
	op := "tools/call " + tool
	cctx, cancel := s.callContext(ctx, op)
	defer cancel()
	res, err := s.cs.CallTool(cctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return Result{}, s.explain(cctx, "calling "+tool, err)
	}
	if f := s.fault.get(); f != nil {
		// Dropped during the call (a request of the server's that could not be recorded):
		// a result that raced in before the drop is not handed on.
		return Result{}, fmt.Errorf("calling %s: %w", tool, f)
	}
	if res.NeedsInput() {
		// The 2026 protocol's way to ask for sampling or elicitation: inside a result.
		// Refused like the request form.
		return Result{}, fmt.Errorf("MCP server %s: tool %s asked for client input (sampling, elicitation or roots), which lev refuses", s.name, tool)
	}
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		default:
			parts = append(parts, fmt.Sprintf("[%T content omitted]", c))
		}
	}
	return Result{Text: strings.Join(parts, "\n"), IsError: res.IsError}, nil
}

// Close ends the session: the SDK's shutdown, then the transport's (a stdio child is
// killed if it lingers). Safe to call more than once.
func (s *Session) Close() error {
	s.once.Do(func() {
		var err1 error
		if s.cs != nil {
			// The SDK's Close waits for the requests in flight, and one can be stuck in a
			// write to a server that stopped reading (bounded by the write deadline, but
			// that may be the whole call timeout): the transport is closed (the child
			// killed, so every read and write ends) once closeGrace passed, whatever the
			// SDK is waiting on, and only then is the SDK waited for.
			closed := make(chan error, 1)
			go func() { closed <- s.cs.Close() }()
			select {
			case err1 = <-closed:
			case <-time.After(closeGrace):
				s.closer()
				err1 = <-closed
			}
		}
		err2 := s.closer()
		s.dropCancel()
		if s.fault.get() == nil {
			s.err = errors.Join(err1, err2)
		}
	})
	return s.err
}
