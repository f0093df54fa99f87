package taintgate

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
)

// The MCP servers of these tests are real MCP servers (the official Go SDK's), so an MCP
// tool call goes the whole way a run's does: offer, permission, gate, the server's
// process or HTTP endpoint, observe. Over stdio the server is this test binary re-executed
// as "TESTBIN taintgate-mcp-server KIND LOG ROOT", started by the run like any stdio
// server (lev's sandbox executor, kind none: the host with lev's state masked; its working
// directory is "/", never the workdir). KIND "fs" serves the files under ROOT (given the
// run's workdir, as a user gives the reference filesystem server its directory); KIND
// "web" pretends to fetch, post and deliver. Every call a server receives is appended to LOG, so a test can tell a
// call the gate blocked from one that reached the server.

const mcpServerArg = "taintgate-mcp-server"

func TestMain(m *testing.M) {
	if len(os.Args) >= 5 && os.Args[1] == mcpServerArg {
		if err := serveStdio(os.Args[2], os.Args[3], os.Args[4]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type pathArgs struct {
	Path string `json:"path"`
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// urlArgs declares url and host, so that a call naming both passes the server's own
// schema check: the point is what lev makes of it.
type urlArgs struct {
	URL  string `json:"url,omitempty"`
	Host string `json:"host,omitempty"`
	Body string `json:"body,omitempty"`
}

// deliverArgs are a tool whose destination argument is not one lev reads a target from
// (endpoint, uri, webhook, server, request.url), beside a path: what lev must make of it
// is the point, so the server's schema accepts each.
type deliverArgs struct {
	Path     string        `json:"path,omitempty"`
	URL      string        `json:"url,omitempty"`
	Content  string        `json:"content,omitempty"`
	Endpoint string        `json:"endpoint,omitempty"`
	URI      string        `json:"uri,omitempty"`
	Webhook  string        `json:"webhook,omitempty"`
	Server   string        `json:"server,omitempty"`
	Referer  string        `json:"referer,omitempty"`
	Request  *deliverInner `json:"request,omitempty"`
}

type deliverInner struct {
	URL string `json:"url,omitempty"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// newTestServer builds the server of one kind; note records each call it receives, root
// is where an fs server resolves relative paths.
func newTestServer(kind, root string, note func(string)) *mcp.Server {
	resolve := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "taintgate-" + kind, Version: "1"}, nil)
	switch kind {
	case "fs":
		// Paths are relative to the server's working directory: the run's workdir.
		mcp.AddTool(s, &mcp.Tool{Name: "read_text_file", Description: "read a file"}, func(_ context.Context, _ *mcp.CallToolRequest, a pathArgs) (*mcp.CallToolResult, any, error) {
			note("read_text_file " + a.Path)
			b, err := os.ReadFile(resolve(a.Path))
			if err != nil {
				return nil, nil, err
			}
			return text(string(b)), nil, nil
		})
		// Not "write_file", the reference server's name for it: lev does not offer a
		// server's tool named like a built-in.
		mcp.AddTool(s, &mcp.Tool{Name: "write_text_file", Description: "write a file"}, func(_ context.Context, _ *mcp.CallToolRequest, a writeArgs) (*mcp.CallToolResult, any, error) {
			note("write_text_file " + a.Path)
			if err := os.WriteFile(resolve(a.Path), []byte(a.Content), 0o644); err != nil {
				return nil, nil, err
			}
			return text("wrote " + a.Path), nil, nil
		})
	case "remote":
		// An HTTP server's files are its own, not the run's workdir.
		mcp.AddTool(s, &mcp.Tool{Name: "read_text_file", Description: "read a file"}, func(_ context.Context, _ *mcp.CallToolRequest, a pathArgs) (*mcp.CallToolResult, any, error) {
			note("read_text_file " + a.Path)
			return text("remote notes for " + a.Path), nil, nil
		})
	case "web":
		for _, name := range []string{"fetch", "post"} {
			mcp.AddTool(s, &mcp.Tool{Name: name, Description: name}, func(_ context.Context, _ *mcp.CallToolRequest, a urlArgs) (*mcp.CallToolResult, any, error) {
				note(name + " " + a.URL + " " + a.Host + " " + a.Body)
				return text(name + " done"), nil, nil
			})
		}
		mcp.AddTool(s, &mcp.Tool{Name: "deliver", Description: "deliver a file"}, func(_ context.Context, _ *mcp.CallToolRequest, a deliverArgs) (*mcp.CallToolResult, any, error) {
			inner := ""
			if a.Request != nil {
				inner = a.Request.URL
			}
			note(strings.Join([]string{"deliver", a.Path, a.URL, a.Endpoint, a.URI, a.Webhook, a.Server, a.Referer, inner}, " "))
			return text("delivered"), nil, nil
		})
	}
	return s
}

func serveStdio(kind, log, root string) error {
	note := func(s string) {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, strings.ReplaceAll(s, "\n", `\n`))
			f.Close()
		}
	}
	return newTestServer(kind, root, note).Run(context.Background(), &mcp.StdioTransport{})
}

// stdioServer is the config.toml table of a stdio test server of kind, logging to log and
// serving root.
func stdioServer(name, kind, log, root, extra string) string {
	return fmt.Sprintf("[mcp.servers.%s]\ncommand = %s\nargs = [%s, %s, %s, %s]\n%s", name, q(os.Args[0]), q(mcpServerArg), q(kind), q(log), q(root), extra)
}

// httpServer starts an HTTP test server of kind on loopback and returns its config.toml
// table; the calls it receives go to log.
func httpServer(t *testing.T, name, kind, log, extra string) string {
	t.Helper()
	note := func(s string) {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, s)
			f.Close()
		}
	}
	srv := newTestServer(kind, "", note)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return fmt.Sprintf("[mcp.servers.%s]\nurl = %s\n%s", name, q(hs.URL+"/mcp"), extra)
}

// received is what a test server's log holds ("" when it got no call).
func received(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// mcpExec is the executor lev serve wires (sandboxexec), which can start stdio servers;
// the run's config.toml sets no [sandbox], so it is kind none: the host, lev's state masked.
func mcpExec(env *pipeline.RunEnv) (pipeline.Executor, error) { return sandboxexec.Factory(env) }

// logFile is a fresh log path for one server.
func logFile(t *testing.T, name string) string {
	return filepath.Join(t.TempDir(), name+".log")
}
