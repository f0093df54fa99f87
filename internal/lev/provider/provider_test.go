package provider

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/levconfig"
)

var convo = &Request{
	Model:  "m1",
	System: "be brief",
	Messages: []Message{
		{Role: "user", Content: "read it"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path":"a"}`)}}},
		{Role: "tool", ToolCallID: "c1", Name: "read_file", Content: "AAA"},
	},
	Tools: []ToolSpec{{Name: "read_file", Description: "read", Schema: json.RawMessage(`{"type":"object"}`)}},
}

func TestOpenAIAndAnthropicProtocols(t *testing.T) {
	type check func(t *testing.T, body map[string]any, hdr http.Header)
	cases := []struct {
		name    string
		ctype   string
		reply   string
		mk      func(base string) Provider
		check   check
		text    string
		call    string
		callArg string
	}{
		{
			name:  "openai buffered tool call",
			ctype: "application/json",
			reply: `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"b\"}"}}]},"finish_reason":"tool_calls"}]}`,
			mk:    func(b string) Provider { return &OpenAI{BaseURL: b + "/v1", APIKey: "sk-test", Client: testClient()} },
			check: func(t *testing.T, body map[string]any, hdr http.Header) {
				if hdr.Get("Authorization") != "Bearer sk-test" {
					t.Errorf("auth %q", hdr.Get("Authorization"))
				}
				msgs := body["messages"].([]any)
				if len(msgs) != 4 || msgs[0].(map[string]any)["role"] != "system" || msgs[3].(map[string]any)["tool_call_id"] != "c1" {
					t.Errorf("messages %v", msgs)
				}
				tc := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
				if tc["function"].(map[string]any)["arguments"] != `{"path":"a"}` {
					t.Errorf("tool call %v", tc)
				}
			},
			call: "write_file", callArg: `{"path":"b"}`,
		},
		{
			name:  "openai streaming text and split tool-call arguments",
			ctype: "text/event-stream",
			reply: "data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"lo\",\"tool_calls\":[{\"index\":0,\"id\":\"c3\",\"function\":{\"name\":\"shell\",\"arguments\":\"{\\\"comm\"}}]}}]}\n\n" +
				": keepalive\n\n" +
				"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"and\\\":\\\"ls\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n" +
				"data: [DONE]\n\n",
			mk: func(b string) Provider { return &OpenAI{BaseURL: b + "/v1", Stream: true, Client: testClient()} },
			check: func(t *testing.T, body map[string]any, hdr http.Header) {
				if body["stream"] != true || hdr.Get("Authorization") != "" {
					t.Errorf("stream %v auth %q", body["stream"], hdr.Get("Authorization"))
				}
			},
			text: "hello", call: "shell", callArg: `{"command":"ls"}`,
		},
		{
			name:  "anthropic buffered tool use",
			ctype: "application/json",
			reply: `{"content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"tu1","name":"list_dir","input":{"path":"."}}],"stop_reason":"tool_use"}`,
			mk:    func(b string) Provider { return &Anthropic{BaseURL: b, APIKey: "ak", Client: testClient()} },
			check: func(t *testing.T, body map[string]any, hdr http.Header) {
				if hdr.Get("x-api-key") != "ak" || hdr.Get("anthropic-version") == "" {
					t.Errorf("headers %v", hdr)
				}
				if body["system"] != "be brief" {
					t.Errorf("system %v", body["system"])
				}
				msgs := body["messages"].([]any)
				last := msgs[2].(map[string]any)["content"].([]any)[0].(map[string]any)
				if last["type"] != "tool_result" || last["tool_use_id"] != "c1" || last["content"] != "AAA" {
					t.Errorf("tool result %v", last)
				}
				use := msgs[1].(map[string]any)["content"].([]any)[0].(map[string]any)
				if use["type"] != "tool_use" || use["name"] != "read_file" {
					t.Errorf("tool use %v", use)
				}
			},
			text: "ok", call: "list_dir", callArg: `{"path":"."}`,
		},
		{
			name:  "anthropic streaming",
			ctype: "text/event-stream",
			reply: "event: message_start\ndata: {\"type\":\"message_start\"}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi \"}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"tu2\",\"name\":\"read_file\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\":\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"x\\\"}\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			mk:    func(b string) Provider { return &Anthropic{BaseURL: b, Stream: true, Client: testClient()} },
			check: func(t *testing.T, body map[string]any, hdr http.Header) {},
			text:  "hi ", call: "read_file", callArg: `{"path":"x"}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var body map[string]any
				data, _ := io.ReadAll(r.Body)
				if err := json.Unmarshal(data, &body); err != nil {
					t.Errorf("request body: %v", err)
				}
				tc.check(t, body, r.Header)
				w.Header().Set("Content-Type", tc.ctype)
				io.WriteString(w, tc.reply)
			}))
			defer srv.Close()
			resp, err := tc.mk(srv.URL).Complete(context.Background(), convo)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != tc.text || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != tc.call || string(resp.ToolCalls[0].Args) != tc.callArg {
				t.Fatalf("response %+v (args %s)", resp, resp.ToolCalls)
			}
		})
	}
}

// TestMTLSBaseURLNoKey: the jail's mode. lev reaches the model through a broker by IP with
// a client certificate; no API key is configured and no Authorization header is sent.
func TestMTLSBaseURLNoKey(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := makeCA(t)
	srvCert := leaf(t, caCert, caKey, "broker", []net.IP{net.ParseIP("127.0.0.1")}, false)
	cliCert := leaf(t, caCert, caKey, "lev-agent", nil, true)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	var sawAuth, sawCN string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth = r.Header.Get("Authorization")
		sawCN = r.TLS.PeerCertificates[0].Subject.CommonName
		if r.URL.Path != "/llm/v1/chat/completions" {
			t.Errorf("path %s", r.URL.Path)
		}
		io.WriteString(w, `{"choices":[{"message":{"content":"via broker"},"finish_reason":"stop"}]}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caCert.Raw)
	writePEM(t, filepath.Join(dir, "cert.pem"), "CERTIFICATE", cliCert.Certificate[0])
	kb, _ := x509.MarshalECPrivateKey(cliCert.PrivateKey.(*ecdsa.PrivateKey))
	writePEM(t, filepath.Join(dir, "key.pem"), "EC PRIVATE KEY", kb)

	t.Setenv("LEV_PROVIDER_BASE_URL", srv.URL+"/llm/v1")
	t.Setenv("LEV_TLS_CERT", filepath.Join(dir, "cert.pem"))
	t.Setenv("LEV_TLS_KEY", filepath.Join(dir, "key.pem"))
	t.Setenv("LEV_TLS_CA", filepath.Join(dir, "ca.pem"))
	cfg, err := levconfig.Parse("config.toml", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg.Provider)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Complete(context.Background(), &Request{Model: "m"})
	if err != nil || resp.Text != "via broker" {
		t.Fatalf("%v %+v", err, resp)
	}
	if sawAuth != "" || sawCN != "lev-agent" {
		t.Fatalf("auth %q cn %q", sawAuth, sawCN)
	}

	// Without the client certificate the broker refuses the handshake.
	cfg.Provider.TLSCert, cfg.Provider.TLSKey = "", ""
	p, _ = New(cfg.Provider)
	if _, err := p.Complete(context.Background(), &Request{Model: "m"}); err == nil {
		t.Fatal("broker accepted a client without a certificate")
	}
	// A server certificate from another CA is refused.
	cfg.Provider.TLSCA = ""
	p, _ = New(cfg.Provider)
	if _, err := p.Complete(context.Background(), &Request{Model: "m"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("unknown CA accepted: %v", err)
	}
}

func makeCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, ips []net.IP, client bool) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, p, typ string, der []byte) {
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestScriptedMatchesRequestContents(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.toml")
	os.WriteFile(p, []byte(modelScript("request-contents-script.toml")), 0o644)
	s, err := LoadScripted(p)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.Complete(context.Background(), &Request{Stage: "a", Messages: []Message{{Role: "user", Content: "the secret"}}})
	if r.Text != "saw it" || len(r.ToolCalls) != 0 {
		t.Fatalf("%+v", r)
	}
	r, _ = s.Complete(context.Background(), &Request{Stage: "a", Messages: []Message{{Role: "user", Content: `a "quoted" path`}}})
	if len(r.ToolCalls) != 1 || string(r.ToolCalls[0].Args) != `{"path": "a \"quoted\" path"}` {
		t.Fatalf("%+v", r)
	}
	if _, err := s.Complete(context.Background(), &Request{Stage: "b"}); err == nil || !strings.Contains(err.Error(), "no rule matches") {
		t.Fatalf("err %v", err)
	}
	os.WriteFile(p, []byte("[[rule]]\ntext = 1\n"), 0o644)
	if _, err := LoadScripted(p); err == nil || !strings.Contains(err.Error(), "s.toml:2") {
		t.Fatalf("bad script: %v", err)
	}
}

// modelScript is a scripted model's rules from testdata/NAME.
func modelScript(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return string(b)
}
