package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// The official SDKs (npm openai and @anthropic-ai/sdk, pinned in the Makefile's
// SDK_PEERS, installed by `make sdk-peers` into LEV_SDK_PEERS) are the test peers here:
// their request types check the bodies lev builds (tsc, TestSDKPeersRequestTypes), and
// their clients and parsers read the same recorded exchanges lev reads
// (TestSDKPeersParse). The exchanges (testdata/sdkpeers) are in the providers' published
// wire formats, every field a real reply carries included; the SDK accepting each one is
// part of what the test checks.

// sdkPeers is the installed SDKs' directory, or a skip (a failure under CI=true, where
// .ci/run installs them).
func sdkPeers(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LEV_SDK_PEERS")
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
			if _, err := exec.LookPath("node"); err == nil {
				return dir
			}
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("the SDK peers are not installed (LEV_SDK_PEERS=%q, node on PATH); run make sdk-peers", dir)
	}
	t.Skipf("the SDK peers are not installed (LEV_SDK_PEERS=%q); run make sdk-peers and set LEV_SDK_PEERS", dir)
	return ""
}

// sdkExchange is one recorded exchange: what lev asks and the reply on the wire.
type sdkExchange struct {
	name  string
	kind  string // client.cjs's KIND
	reply string // file under testdata/sdkpeers
	// lev reads the reply with its own provider against base (the server's URL)
	lev func(base string) (*peerView, error)
	// sdkBase is the base URL the SDK is given
	sdkBase func(base string) string
	// tsType is the SDK's type for the body lev sends (module, type)
	tsModule, tsType string
}

// peerView is a reply as one client read it, normalised for comparison.
type peerView struct {
	Text      string           `json:"text"`
	ToolCalls []peerCall       `json:"tool_calls"`
	Stop      string           `json:"stop,omitempty"`
	Usage     map[string]int64 `json:"usage"`
	Sources   []Source         `json:"sources,omitempty"`
}

type peerCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Args any    `json:"args"`
}

func levView(r *Response, err error) (*peerView, error) {
	if err != nil {
		return nil, err
	}
	v := &peerView{Text: r.Text, Stop: r.Stop, ToolCalls: []peerCall{}, Usage: map[string]int64{"input_tokens": r.Usage.InputTokens, "output_tokens": r.Usage.OutputTokens}}
	for _, c := range r.ToolCalls {
		var a any
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, err
		}
		v.ToolCalls = append(v.ToolCalls, peerCall{ID: c.ID, Name: c.Name, Args: a})
	}
	return v, nil
}

func levSearchView(r *SearchResult, err error) (*peerView, error) {
	if err != nil {
		return nil, err
	}
	return &peerView{Text: r.Text, ToolCalls: []peerCall{}, Sources: r.Sources, Usage: map[string]int64{"input_tokens": r.Usage.InputTokens, "output_tokens": r.Usage.OutputTokens}}, nil
}

var sdkExchanges = []sdkExchange{
	{name: "openai chat completions, tool calls", kind: "openai-chat", reply: "openai-chat.json",
		lev: func(b string) (*peerView, error) {
			return levView((&OpenAI{BaseURL: b + "/v1", Client: testClient()}).Complete(context.Background(), convo))
		},
		sdkBase: func(b string) string { return b + "/v1" }, tsModule: "openai/resources/chat/completions", tsType: "ChatCompletionCreateParamsNonStreaming"},
	{name: "openai chat completions, streamed text and tool calls", kind: "openai-chat-stream", reply: "openai-chat-stream.sse",
		lev: func(b string) (*peerView, error) {
			return levView((&OpenAI{BaseURL: b + "/v1", Stream: true, Client: testClient()}).Complete(context.Background(), convo))
		},
		sdkBase: func(b string) string { return b + "/v1" }, tsModule: "openai/resources/chat/completions", tsType: "ChatCompletionCreateParamsStreaming"},
	{name: "openai responses, web search", kind: "openai-responses", reply: "openai-responses.json",
		lev: func(b string) (*peerView, error) {
			return levSearchView((&OpenAI{BaseURL: b + "/v1", Client: testClient()}).Search(context.Background(), &SearchRequest{Model: "gpt-4.1", Query: "go 1.25 release date"}))
		},
		sdkBase: func(b string) string { return b + "/v1" }, tsModule: "openai/resources/responses/responses", tsType: "ResponseCreateParamsNonStreaming"},
	{name: "anthropic messages, text and tool use", kind: "anthropic", reply: "anthropic.json",
		lev: func(b string) (*peerView, error) {
			return levView((&Anthropic{BaseURL: b, Client: testClient()}).Complete(context.Background(), convo))
		},
		sdkBase: func(b string) string { return b }, tsModule: "@anthropic-ai/sdk/resources/messages", tsType: "MessageCreateParamsNonStreaming"},
	{name: "anthropic messages, streamed text and tool use", kind: "anthropic-stream", reply: "anthropic-stream.sse",
		lev: func(b string) (*peerView, error) {
			return levView((&Anthropic{BaseURL: b, Stream: true, Client: testClient()}).Complete(context.Background(), convo))
		},
		sdkBase: func(b string) string { return b }, tsModule: "@anthropic-ai/sdk/resources/messages", tsType: "MessageCreateParamsStreaming"},
	{name: "anthropic messages, web search server tool", kind: "anthropic", reply: "anthropic-search.json",
		lev: func(b string) (*peerView, error) {
			return levSearchView((&Anthropic{BaseURL: b, Client: testClient()}).Search(context.Background(), &SearchRequest{Model: "claude-sonnet-4-5", Query: "go 1.25 release date"}))
		},
		sdkBase: func(b string) string { return b }, tsModule: "@anthropic-ai/sdk/resources/messages", tsType: "MessageCreateParamsNonStreaming"},
}

// replayServer answers every request with the recorded reply and keeps the bodies.
type replayServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
	paths  []string
}

func newReplayServer(t *testing.T, file string) *replayServer {
	t.Helper()
	reply, err := os.ReadFile(filepath.Join("testdata", "sdkpeers", file))
	if err != nil {
		t.Fatal(err)
	}
	ctype := "application/json"
	if strings.HasSuffix(file, ".sse") {
		ctype = "text/event-stream"
	}
	rs := &replayServer{}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		b.ReadFrom(r.Body)
		rs.mu.Lock()
		rs.bodies = append(rs.bodies, b.String())
		rs.paths = append(rs.paths, r.URL.Path)
		rs.mu.Unlock()
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("request-id", "req_test")
		w.Write(reply)
	}))
	t.Cleanup(rs.Close)
	return rs
}

// TestSDKPeersParse: for each recorded exchange, lev's provider and the official SDK (as
// a client of the same recorded-exchange server, sending the body lev built through its
// own request builder, reading the reply with its own parser) read the same text, tool
// calls (ids, names, arguments), stop reason, token usage and search sources; and both
// asked the same endpoint.
func TestSDKPeersParse(t *testing.T) {
	peers := sdkPeers(t)
	for _, x := range sdkExchanges {
		t.Run(x.name, func(t *testing.T) {
			srv := newReplayServer(t, x.reply)
			lv, err := x.lev(srv.URL)
			if err != nil {
				t.Fatalf("lev: %v", err)
			}
			levBody, levPath := srv.bodies[0], srv.paths[0]
			cmd := exec.Command("node", filepath.Join("testdata", "sdkpeers", "client.cjs"), x.kind, x.sdkBase(srv.URL))
			cmd.Env = append(os.Environ(), "LEV_SDK_PEERS="+peers)
			cmd.Stdin = strings.NewReader(levBody)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("the SDK refused the exchange: %v\n%s", err, stderr.String())
			}
			var sv peerView
			if err := json.Unmarshal(out, &sv); err != nil {
				t.Fatalf("SDK output %s: %v", out, err)
			}
			if strings.HasSuffix(x.reply, "search.json") || x.kind == "openai-responses" {
				sv.Stop = "" // a search reads no stop reason (lev's SearchResult has none)
			}
			if sv.Sources == nil {
				sv.Sources = lv.Sources[:0:0]
			}
			if lv.Sources == nil {
				lv.Sources = sv.Sources[:0:0]
			}
			if !reflect.DeepEqual(*lv, sv) {
				l, _ := json.Marshal(lv)
				t.Fatalf("lev and the SDK read the exchange differently:\n lev %s\n sdk %s", l, out)
			}
			if len(srv.paths) != 2 || srv.paths[1] != levPath {
				t.Fatalf("lev asked %s, the SDK %v", levPath, srv.paths[1:])
			}
			// The exchange is not trivial: what each case is about was read.
			if lv.Usage["input_tokens"] == 0 || (len(lv.ToolCalls) == 0 && len(lv.Sources) == 0) && !strings.Contains(x.name, "text") {
				t.Fatalf("the exchange read as nothing much: %+v", lv)
			}
		})
	}
}

// TestSDKPeersRequestTypes: every body lev sends (chat completions buffered and streamed,
// the Responses API's web search, Messages buffered, streamed and with the web search
// server tool) type-checks, as an object literal (so with excess-property checks), against
// the official SDK's own request type, under tsc --strict. Controls: the same bodies with
// a misspelt field, and with a tool type the API does not have, fail the check, naming
// them (the check can fail).
func TestSDKPeersRequestTypes(t *testing.T) {
	peers := sdkPeers(t)
	tsc := filepath.Join(peers, "node_modules", ".bin", "tsc")
	var good strings.Builder
	var bodies []string
	for i, x := range sdkExchanges {
		srv := newReplayServer(t, x.reply)
		if _, err := x.lev(srv.URL); err != nil {
			t.Fatalf("%s: lev: %v", x.name, err)
		}
		bodies = append(bodies, srv.bodies[0])
		good.WriteString("import type { " + x.tsType + " as T" + itoa(i) + " } from \"" + x.tsModule + "\";\n")
	}
	for i, b := range bodies {
		good.WriteString("export const body" + itoa(i) + ": T" + itoa(i) + " = " + b + ";\n")
	}
	check := func(name, src string) (string, error) {
		dir := t.TempDir()
		if err := os.Symlink(filepath.Join(peers, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name+".ts")
		os.WriteFile(f, []byte(src), 0o644)
		cmd := exec.Command(tsc, "--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", f)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := check("lev-bodies", good.String()); err != nil {
		t.Fatalf("lev's request bodies do not type-check against the SDKs' types: %v\n%s\n%s", err, out, good.String())
	}
	bad := []struct{ name, from, to, want string }{
		{"misspelt field", `"max_tokens":`, `"max_tokenz":`, "max_tokenz"},
		{"tool type the API does not have", `"type":"function"`, `"type":"functon"`, "functon"},
	}
	for _, b := range bad {
		src := good.String()
		if !strings.Contains(src, b.from) {
			t.Fatalf("%s: the bodies have no %s to change", b.name, b.from)
		}
		src = strings.Replace(src, b.from, b.to, 1)
		out, err := check("bad", src)
		if err == nil || !strings.Contains(out, b.want) {
			t.Fatalf("control %s: tsc passed or did not name %q: %v\n%s", b.name, b.want, err, out)
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }
