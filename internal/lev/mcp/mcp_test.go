package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
)

func connect(t *testing.T, srv Server, opts Options) *Session {
	t.Helper()
	s, err := Connect(context.Background(), srv, opts)
	if err != nil {
		t.Fatalf("Connect(%s): %v", srv.Name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestStdioHostile: each row's server misbehaves (or, for the controls, does not) on the
// same stdio path; the list or call fails with lev's message or succeeds.
func TestStdioHostile(t *testing.T) {
	long := strings.Repeat("x", 65)
	cases := []struct {
		name, mode, arg string
		timeout         time.Duration
		wantErr         string // "" = must succeed
		wantCap         bool
	}{
		{"control: a 900 KiB line passes (its 900 KiB description is then refused)", "pad", "921600", 0, "", false},
		{"endless line", "endless", "", 0, "line exceeded 1 MiB from the MCP server srv", true},
		{"a 1 MiB + 1 KiB line", "pad", "1049600", 0, "line exceeded 1 MiB from the MCP server srv", true},
		{"control: answers within the deadline", "ok", "", time.Second, "", false},
		{"never answers", "hang", "", time.Second, "MCP server srv did not answer tools/list within 1s", false},
		{"control: a good tool name", "badname", "good-tool_1", 0, "", false},
		{"tool name with a slash", "badname", "read/file", 0, `MCP server srv offers a tool named "read/file"`, false},
		{"tool name with a space", "badname", "a b", 0, `MCP server srv offers a tool named "a b"`, false},
		{"tool name with a dot", "badname", "a.b", 0, `MCP server srv offers a tool named "a.b"`, false},
		{"tool name 65 long", "badname", long, 0, `MCP server srv offers a tool named "` + long + `"`, false},
		{"tool name leading underscore", "badname", "_x", 0, `MCP server srv offers a tool named "_x"`, false},
		{"tool name with a bidi override", "badname", "ok\u202egnp", 0, `MCP server srv offers a tool named "ok\u202egnp"`, false},
		{"tool listed twice", "dup", "", 0, `MCP server srv lists the tool "echo" twice`, false},
		{"control: 8 MiB of stderr before serving", "stderr", "8388608", 5 * time.Second, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := connect(t, fakeServer("srv", tc.mode, tc.arg, nil), Options{Timeout: tc.timeout})
			start := time.Now()
			tools, err := s.Tools(context.Background())
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if tc.wantErr == "" {
				if err != nil || len(tools) != 1 {
					t.Fatalf("Tools = %v, %v; want one tool", tools, err)
				}
				// The whole line arrived: lev read the description's every byte, and then
				// refused the tool for it (MaxToolDescription), keeping none of them.
				if tc.mode == "pad" && (!strings.Contains(tools[0].Refused, "a description of 921600 bytes") || tools[0].Description != "") {
					t.Fatalf("tool %s", brief(tools[0]))
				}
				if tc.mode == "badname" && tools[0].Name != tc.arg {
					t.Fatalf("tool %q", tools[0].Name)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Tools err = %v\nwant %q", err, tc.wantErr)
			}
			if capread.IsCap(err) != tc.wantCap {
				t.Fatalf("IsCap = %v", !tc.wantCap)
			}
			if tc.mode == "hang" && time.Since(start) > 3*time.Second {
				t.Fatalf("deadline took %v", time.Since(start))
			}
			if tc.wantCap {
				// The line reader holds at most the cap; the peer sends without end.
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 24<<20 {
					t.Fatalf("allocated %d MiB reading a capped line", grew>>20)
				}
				t.Logf("allocated %.1f MiB in all", float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
				// The connection is dropped: the next call fails with the same cap.
				if _, err := s.Call(context.Background(), "echo", nil); err == nil || !capread.IsCap(err) {
					t.Fatalf("call after the cap: %v", err)
				}
			}
		})
	}
}

// TestStdioEnvironment: the child sees exactly the Env it was given, never lev's own
// (LEV_TOKEN, keys). The control passes lev's environment on purpose and sees the token,
// which shows the tool reports the child's environment faithfully.
func TestStdioEnvironment(t *testing.T) {
	t.Setenv("LEV_TOKEN", "lev-secret-token")
	t.Setenv("OPENAI_API_KEY", "sk-secret")
	cases := []struct {
		name string
		env  []string
		want func(string) bool
	}{
		{"nil env: empty", nil, func(s string) bool { return s == "" }},
		{"explicit env only", []string{"FOO=bar", "PATH=/usr/bin"}, func(s string) bool { return s == "FOO=bar\nPATH=/usr/bin" }},
		{"control: lev's env passed on purpose", os.Environ(), func(s string) bool {
			return strings.Contains(s, "LEV_TOKEN=lev-secret-token") && strings.Contains(s, "OPENAI_API_KEY=sk-secret")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := connect(t, fakeServer("envsrv", "env", "", tc.env), Options{Timeout: 5 * time.Second})
			res, err := s.Call(context.Background(), "env", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(res.Text) {
				t.Fatalf("child environment:\n%s", res.Text)
			}
		})
	}
}

// TestServerRequestsRefused: a server asks for sampling, elicitation and roots during a
// tool call; each is answered with an error and reported. Its ping (the control: a server
// request that is allowed) is answered, so the requests do reach the client. lev advertises
// no capability at all.
func TestServerRequestsRefused(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		testServerRequests(t, func() Server { return fakeServer("asker", "ask", "", nil) })
	})
	t.Run("streamable HTTP", func(t *testing.T) {
		f := &fakeHTTP{mode: "ask", done: make(chan struct{}), answers: make(chan rpcMsg, 4)}
		hs := httptest.NewServer(f)
		t.Cleanup(hs.Close)
		testServerRequests(t, func() Server { return Server{Name: "asker", URL: hs.URL} })
	})
}

func testServerRequests(t *testing.T, srv func() Server) {
	var mu sync.Mutex
	var seen []Request
	s := connect(t, srv(), Options{Timeout: 5 * time.Second, OnServerRequest: func(r Request) error {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		return nil
	}})
	res, err := s.Call(context.Background(), "anything", nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(res.Text, "\n")
	if len(lines) != 5 {
		t.Fatalf("tool result %q", res.Text)
	}
	want := map[string]string{
		"ping":                   "ping: result {}",
		"sampling/createMessage": `sampling/createMessage: error {"code":-32600,"message":"lev refuses sampling/createMessage requests from MCP servers"}`,
		"elicitation/create":     `elicitation/create: error {"code":-32600,"message":"lev refuses elicitation/create requests from MCP servers"}`,
		"roots/list":             `roots/list: error {"code":-32600,"message":"lev refuses roots/list requests from MCP servers"}`,
	}
	for _, l := range lines[:4] {
		meth, _, _ := strings.Cut(l, ":")
		if want[meth] != l {
			t.Errorf("server saw %q\nwant %q", l, want[meth])
		}
	}
	if lines[4] != "capabilities: {}" {
		t.Errorf("advertised %q, want no capabilities", lines[4])
	}
	mu.Lock()
	defer mu.Unlock()
	var methods []string
	for _, r := range seen {
		if r.Server != "asker" {
			t.Errorf("reported server %q", r.Server)
		}
		methods = append(methods, r.Method)
		if r.Method == "sampling/createMessage" && !strings.Contains(string(r.Params), "leak the token") {
			t.Errorf("sampling params not reported: %s", r.Params)
		}
	}
	slices.Sort(methods)
	if strings.Join(methods, ",") != "elicitation/create,roots/list,sampling/createMessage" {
		t.Fatalf("reported %v", methods)
	}
}

// TestServerRequestNotRecordedFailsClosed: a server asks for sampling, elicitation and
// roots during a tool call (roots configured, so roots/list would be answered) while the
// report, which records each request, fails: the call fails naming the request and the
// report's error, the session is dropped (a later call fails the same way without
// reaching the server), and nothing was answered. Control: the same server with a report
// that records has the call succeed and roots/list answered.
func TestServerRequestNotRecordedFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    error
		wantErr string
	}{
		{"control: recorded", nil, ""},
		// The SDK takes the server's requests concurrently: whichever is reported first
		// drops the session.
		{"record fails", errors.New("disk full"), `^calling anything: MCP server asker: session dropped: its (sampling/createMessage|elicitation/create|roots/list) request could not be recorded: disk full$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen []string
			s := connect(t, fakeServer("asker", "ask", "", nil), Options{Timeout: 5 * time.Second, Roots: []string{"file:///work"},
				OnServerRequest: func(r Request) error {
					mu.Lock()
					seen = append(seen, r.Method)
					mu.Unlock()
					return tc.fail
				}})
			res, err := s.Call(context.Background(), "anything", nil)
			if tc.fail == nil {
				if err != nil || !strings.Contains(res.Text, `roots/list: result {"roots":[{"uri":"file:///work"}]}`) {
					t.Fatalf("control: %v\n%s", err, res.Text)
				}
				return
			}
			if err == nil || !regexp.MustCompile(tc.wantErr).MatchString(err.Error()) {
				t.Fatalf("call: %v (result %q)\nwant %s", err, res.Text, tc.wantErr)
			}
			if _, err2 := s.Call(context.Background(), "anything", nil); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("later call: %v\nwant %v", err2, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) == 0 {
				t.Fatal("nothing reported")
			}
		})
	}
}

// TestHTTPHostile: the same caps over Streamable HTTP, each with a control under the cap
// through the same path. After a cap the connection is dropped: the server could not send
// much past it.
func TestHTTPHostile(t *testing.T) {
	cases := []struct {
		name    string
		mode    string
		n       int
		timeout time.Duration
		wantErr string
	}{
		{"control: 60 MiB JSON reply", "json", 60 << 20, 0, ""},
		{"65 MiB JSON reply", "json", 65 << 20, 0, "response body exceeded 64 MiB from the MCP server web"},
		{"512 MiB JSON reply", "json", 512 << 20, 0, "response body exceeded 64 MiB from the MCP server web"},
		{"declared 65 MiB", "declared", 65 << 20, 0, "response body exceeded 64 MiB from the MCP server web"},
		{"control: 7 MiB SSE frame", "sse", 7 << 20, 0, ""},
		{"9 MiB SSE frame", "sse", 9 << 20, 0, "stream frame exceeded 8 MiB from the MCP server web"},
		{"512 MiB SSE frame", "sse", 512 << 20, 0, "stream frame exceeded 8 MiB from the MCP server web"},
		{"control: 60 MiB reply as 60 SSE events", "ssemany", 60, 0, ""},
		{"65 MiB reply as 65 SSE events", "ssemany", 65, 0, "response body exceeded 64 MiB from the MCP server web"},
		{"control: gzip reply inflating to 60 MiB", "gzip", 60 << 20, 0, ""},
		{"gzip reply inflating to 512 MiB", "gzip", 512 << 20, 0, "response body exceeded 64 MiB from the MCP server web"},
		{"control: small reply within the deadline", "json", 10, time.Second, ""},
		{"never answers", "hang", 0, time.Second, "MCP server web did not answer tools/list within 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeHTTP{mode: tc.mode, n: tc.n, done: make(chan struct{})}
			hs := httptest.NewServer(f)
			defer hs.Close()
			s := connect(t, Server{Name: "web", URL: hs.URL + "/mcp"}, Options{Timeout: tc.timeout})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			tools, err := s.Tools(context.Background())
			runtime.ReadMemStats(&after)
			t.Logf("allocated %.0f MiB in all (client and server)", float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
			if tc.wantErr == "" {
				if err != nil || len(tools) != 1 {
					t.Fatalf("Tools: %d tools, %v", len(tools), err)
				}
				// The whole reply arrived: its description's every byte was read (a big
				// one is then refused for its size, MaxToolDescription, and not kept).
				got := len(tools[0].Description)
				if tc.n > MaxToolDescription {
					got = -1
					if strings.Contains(tools[0].Refused, fmt.Sprintf("a description of %d bytes", tc.n)) && tools[0].Description == "" {
						got = tc.n
					}
				}
				if got != tc.n {
					t.Fatalf("Tools: %s; want a description of %d bytes", brief(tools[0]), tc.n)
				}
				res, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"hi"}`))
				if err != nil || res.Text != "hi" {
					t.Fatalf("Call = %+v, %v", res, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Tools err = %v\nwant %q", err, tc.wantErr)
			}
			if tc.mode == "hang" {
				return
			}
			if !capread.IsCap(err) {
				t.Fatalf("not a cap error: %v", err)
			}
			select {
			case <-f.done:
			case <-time.After(10 * time.Second):
				t.Fatal("server still sending 10s after the cap")
			}
			// With an (almost) endless peer, the drop shows: it could send little past the
			// cap (socket buffers) before its writes failed.
			sent := f.sent.Load()
			t.Logf("server sent %.1f MiB before the connection dropped", float64(sent)/(1<<20))
			if tc.n >= 512<<20 && sent > 128<<20 {
				t.Fatalf("server sent %d MiB: the connection was not dropped", sent>>20)
			}
			if _, err := s.Call(context.Background(), "echo", nil); err == nil || !capread.IsCap(err) {
				t.Fatalf("call after the cap: %v", err)
			}
		})
	}
}

// TestToolListCaps: what lev takes from tools/list is capped beside the transport (docs/mcp.md,
// "Caps and deadlines"). A tool whose description or input schema is over its cap is listed
// refused, naming the server, the tool, its size and the cap, and keeps neither; the
// server's other tool is still offered and called. A list of more than MaxToolsBytes, paged
// so that no reply comes near a transport cap, fails whole, naming the tool it passed the
// cap at. The controls sit exactly at each cap, on the same server.
func TestToolListCaps(t *testing.T) {
	for _, tc := range []struct {
		name, mode, arg string
		tools           int    // listed; 0: Tools fails
		refused         string // the "big" tool's Refused; "" for none
		wantErr         string
	}{
		{"control: a description and a schema at the caps", "sized", "65536,262144", 2, "", ""},
		{"a description a byte over", "sized", "65537,100", 2,
			`MCP server srv offers the tool "big" with a description of 65537 bytes, over lev's cap of 64 KiB on a tool's description: not offered`, ""},
		{"a 1000 KiB description", "sized", "1024000,100", 2, "a description of 1024000 bytes", ""},
		{"an input schema a byte over", "sized", "10,262145", 2,
			`MCP server srv offers the tool "big" with an input schema of 262145 bytes (as JSON), over lev's cap of 256 KiB on a tool's input schema: not offered`, ""},
		{"control: 136 tools of 60 KiB in 14 pages (8 MiB less 29 KiB)", "many", "136", 136, "", ""},
		{"137 tools of 60 KiB in 14 pages", "many", "137", 0, "",
			`MCP server srv lists more than 8 MiB of tools (names, descriptions and input schemas, lev's cap on one server's list; passed at the tool "t136"): it offers nothing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := connect(t, fakeServer("srv", tc.mode, tc.arg, nil), Options{Timeout: 10 * time.Second})
			tools, err := s.Tools(context.Background())
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Tools = %d tools, %v\nwant %q", len(tools), err, tc.wantErr)
				}
				if capread.IsCap(err) {
					t.Fatalf("a transport cap, not lev's cap on the list: %v", err)
				}
				return
			}
			if err != nil || len(tools) != tc.tools {
				t.Fatalf("Tools = %d tools, %v; want %d", len(tools), err, tc.tools)
			}
			if tc.mode == "many" {
				for _, tl := range tools {
					if tl.Refused != "" || len(tl.Description) != 60<<10 {
						t.Fatalf("tool %s", brief(tl))
					}
				}
				return
			}
			big := tools[1]
			if big.Name != "big" || !strings.Contains(big.Refused, tc.refused) {
				t.Fatalf("big: refused %q, want %q", big.Refused, tc.refused)
			}
			if tc.refused == "" {
				dn, sn, _ := strings.Cut(tc.arg, ",")
				if big.Refused != "" || fmt.Sprint(len(big.Description)) != dn || fmt.Sprint(len(big.InputSchema)) != sn {
					t.Fatalf("control: big kept with a %d-byte description and a %d-byte schema, refused %q; want %s and %s",
						len(big.Description), len(big.InputSchema), big.Refused, dn, sn)
				}
			} else if big.Description != "" || big.InputSchema != nil {
				t.Fatalf("a refused tool's description or schema was kept: %d, %d bytes", len(big.Description), len(big.InputSchema))
			}
			// The other tool is offered and works.
			if tools[0].Name != "echo" || tools[0].Refused != "" {
				t.Fatalf("echo: %+v", tools[0])
			}
			res, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"hi"}`))
			if err != nil || res.Text != "hi" {
				t.Fatalf("Call = %+v, %v", res, err)
			}
		})
	}
}

// brief describes a listed tool without its (large) description and schema.
func brief(t Tool) string {
	return fmt.Sprintf("%s: %d-byte description, %d-byte schema, refused %q", t.Name, len(t.Description), len(t.InputSchema), t.Refused)
}

// TestConnectRefusesBadConfig: bad input names the bad field and starts nothing.
func TestConnectRefusesBadConfig(t *testing.T) {
	cases := []struct {
		srv  Server
		want string
	}{
		{Server{Name: "a__b", Command: "true"}, `bad MCP server name "a__b"`},
		{Server{Name: "a_", Command: "true"}, `bad MCP server name "a_"`},
		{Server{Name: "x", Command: "true", URL: "http://127.0.0.1:1"}, "MCP server x: set exactly one of command (stdio) or url (HTTP)"},
		{Server{Name: "x"}, "MCP server x: set exactly one of command (stdio) or url (HTTP)"},
		{Server{Name: "x", URL: "file:///etc/passwd"}, `MCP server x: url "file:///etc/passwd": want http:// or https:// with a host`},
		{Server{Name: "x", Command: "/nonexistent/server"}, "MCP server x: starting /nonexistent/server"},
		{Server{Name: "x", Command: "/nonexistent/server", SSE: true}, "MCP server x: the HTTP+SSE transport is for a url, not a stdio command"},
	}
	for _, tc := range cases {
		_, err := Connect(context.Background(), tc.srv, Options{Timeout: time.Second})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.srv, err, tc.want)
		}
	}
}

// TestConnectDeadline: a server that never completes the handshake fails Connect with the
// deadline named, and soon; the control is a server that does, on the same path.
func TestConnectDeadline(t *testing.T) {
	mute := httptest.NewServer(&fakeHTTP{mode: "mute", done: make(chan struct{})})
	defer mute.Close()
	ok := httptest.NewServer(&fakeHTTP{mode: "json", n: 1, done: make(chan struct{})})
	defer ok.Close()
	cases := []struct {
		name    string
		srv     Server
		wantErr string
	}{
		{"control: stdio handshake", fakeServer("quick", "ok", "", nil), ""},
		{"stdio child that never speaks", Server{Name: "mute", Command: "sleep", Args: []string{"30"}}, "MCP server mute did not answer initialize within 1s"},
		{"control: HTTP handshake", Server{Name: "quick", URL: ok.URL}, ""},
		{"HTTP server that never answers", Server{Name: "mute", URL: mute.URL}, "MCP server mute did not answer initialize within 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			s, err := Connect(context.Background(), tc.srv, Options{Timeout: time.Second})
			took := time.Since(start)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if took > 2500*time.Millisecond {
				t.Fatalf("Connect took %v", took)
			}
		})
	}
}
