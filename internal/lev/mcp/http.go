package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/provider"
)

// httpTransport is the SDK's Streamable HTTP client (or, for Server.SSE, its client for the
// older HTTP+SSE transport) over a RoundTripper that caps every response body it returns: a
// JSON reply (or error page) at capread.BodyCap, an SSE stream at capread.FrameCap per event
// and, for the reply to one POST, BodyCap in all. Both transports share that one client, so
// neither reads a byte that bypasses the caps, and neither sends a request off the
// configured url's origin.
type httpTransport struct {
	inner sdk.Transport
	base  *http.Transport
	// stop ends the HTTP+SSE transport's long-lived GET (nil for Streamable HTTP).
	stop context.CancelFunc
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
	rt := &capTransport{base: base, headers: srv.Headers, name: srv.Name, fault: f, origin: origin(u), sse: srv.SSE}
	client := &http.Client{Transport: rt, CheckRedirect: provider.SameOrigin}
	if srv.SSE {
		return &httpTransport{
			// The SDK's own event limit sits above FrameCap, so lev's cap (counted on the
			// raw bytes, before the SDK buffers them) always fires first, with the
			// message docs/mcp.md gives.
			inner: &sdk.SSEClientTransport{Endpoint: srv.URL, HTTPClient: client, MaxEventSize: 2 * capread.FrameCap},
			base:  base,
		}, nil
	}
	return &httpTransport{
		inner: &sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: client, MaxRetries: 2},
		base:  base,
	}, nil
}

func (t *httpTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	if _, ok := t.inner.(*sdk.SSEClientTransport); !ok {
		return t.inner.Connect(ctx)
	}
	// The HTTP+SSE transport's GET stream is the session: the SDK opens it with Connect's
	// context, which lev cancels once the handshake is done. So the stream gets a context
	// of its own, cancelled by Connect's only while Connect runs (the handshake deadline
	// still bounds a server that never sends its endpoint event), and by close after.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	conn, err := t.inner.Connect(lctx)
	if !stop() {
		err = errors.Join(err, context.Cause(ctx)) // ctx ended: the stream is gone
	}
	if err != nil {
		cancel()
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	t.stop = cancel
	return conn, nil
}

func (t *httpTransport) close() error {
	if t.stop != nil {
		t.stop()
	}
	t.base.CloseIdleConnections()
	return nil
}

// origin is u's scheme://host:port, lower-cased, the port spelled out.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

type capTransport struct {
	base    http.RoundTripper
	headers map[string]string
	name    string
	fault   *fault
	// origin is the configured url's: every request goes there. Redirects are checked by
	// provider.SameOrigin; this catches the rest, chiefly the message endpoint an HTTP+SSE
	// server announces in its endpoint event (a server naming another host would have lev
	// POST the session's messages, and whatever headers the config sets, to that host).
	origin string
	sse    bool
}

func (t *capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Past a cap the connection is dropped for good: no retry, resume or new stream.
	if err := t.fault.get(); err != nil {
		return nil, err
	}
	if o := origin(req.URL); o != t.origin {
		var err error
		if t.sse {
			err = fmt.Errorf("MCP server %s announced its message endpoint at %s, another origin than its url's (%s): refused, lev sends an MCP server's requests only to the configured url's origin", t.name, o, t.origin)
		} else {
			err = fmt.Errorf("MCP server %s: request to %s, another origin than its url's (%s): refused", t.name, o, t.origin)
		}
		t.fault.set(err)
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
