package mcp

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/provider"
)

// httpTransport is the SDK's Streamable HTTP client over a RoundTripper that caps every
// response body it returns: a JSON reply (or error page) at capread.BodyCap, an SSE stream
// at capread.FrameCap per event and, for the reply to one POST, BodyCap in all.
type httpTransport struct {
	inner *sdk.StreamableClientTransport
	base  *http.Transport
}

func newHTTP(srv Server, f *fault) (*httpTransport, error) {
	u, err := url.Parse(srv.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("MCP server %s: url %q: want http:// or https:// with a host", srv.Name, srv.URL)
	}
	for k := range srv.Headers {
		if k == "" || http.CanonicalHeaderKey(k) == "Content-Length" {
			return nil, fmt.Errorf("MCP server %s: header %q cannot be set", srv.Name, k)
		}
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil // the jail's egress is the firewall's business, not an env var's
	rt := &capTransport{base: base, headers: srv.Headers, name: srv.Name, fault: f}
	client := &http.Client{Transport: rt, CheckRedirect: provider.SameOrigin}
	return &httpTransport{
		inner: &sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: client, MaxRetries: 2},
		base:  base,
	}, nil
}

func (t *httpTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	return t.inner.Connect(ctx)
}

func (t *httpTransport) close() error {
	t.base.CloseIdleConnections()
	return nil
}

type capTransport struct {
	base    http.RoundTripper
	headers map[string]string
	name    string
	fault   *fault
}

func (t *capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Past a cap the connection is dropped for good: no retry, resume or new stream.
	if err := t.fault.get(); err != nil {
		return nil, err
	}
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		total := int64(-1) // the standalone GET stream lives as long as the session
		if req.Method == http.MethodPost {
			total = capread.BodyCap
		}
		resp.Body = &capBody{r: resp.Body, t: t, total: total, sse: true}
		return resp, nil
	}
	if resp.ContentLength > capread.BodyCap {
		resp.Body.Close()
		err := capErr("response body", capread.BodyCap, t.name)
		t.fault.set(err)
		return nil, err
	}
	resp.Body = &capBody{r: resp.Body, t: t, total: capread.BodyCap}
	return resp, nil
}

// capBody passes a body through while counting: all of it against total (-1: no bound),
// and, for SSE, each event (the bytes up to a blank line) against FrameCap. Past a cap the
// error sticks, the fault is recorded and the body is closed unread, which drops the
// connection (the SDK's drain-before-close then reads nothing more).
type capBody struct {
	r     io.ReadCloser
	t     *capTransport
	total int64
	sse   bool

	mu    sync.Mutex
	n     int64 // bytes so far
	frame int64 // bytes of the current SSE event
	eol   bool  // the last byte ended a line
	cr    bool  // the last byte was '\r' (a following '\n' belongs to it)
	err   error
}

func (b *capBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.total >= 0 && b.n > b.total {
		return 0, b.fail(capErr("response body", b.total, b.t.name))
	}
	if b.sse {
		for _, c := range p[:n] {
			b.frame++
			switch c {
			case '\r', '\n':
				if c == '\n' && b.cr {
					b.cr = false
					continue
				}
				if b.eol { // an empty line: the event ends
					b.frame = 0
				}
				b.eol, b.cr = true, c == '\r'
			default:
				b.eol, b.cr = false, false
			}
			if b.frame > capread.FrameCap {
				return 0, b.fail(capErr("stream frame", capread.FrameCap, b.t.name))
			}
		}
	}
	return n, err
}

func (b *capBody) fail(err error) error {
	b.err = err
	b.t.fault.set(err)
	b.r.Close()
	return err
}

func (b *capBody) Close() error { return b.r.Close() }
