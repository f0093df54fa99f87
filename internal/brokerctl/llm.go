package brokerctl

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/brokerctl/bodypolicy"
	"github.com/lever-jail/lever/internal/brokerctl/keymask"
	"github.com/lever-jail/lever/internal/config"
)

var dropResponse = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Set-Cookie": true,
	"Accept-Ranges": true, "Alt-Svc": true,
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// upstreamReaders buffer the upstream's answer (32 KiB each): allocating one per request
// was a quarter of the bytes the broker allocated per small call.
var upstreamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// joinBufs hold the head of a plain answer (keymask.JoinLimit, plus one byte to tell a longer one).
var joinBufs = sync.Pool{New: func() any { b := make([]byte, keymask.JoinLimit+1); return &b }}

// bodyEncoding reads an upstream response's Content-Encoding. The broker asks for gzip
// and decodes it itself; identity (or none) needs nothing. Anything else, including a
// list ("gzip, identity") or an encoding the broker did not ask for, is refused: the
// masker would see encoded bytes and the client could decode the key out of them.
func bodyEncoding(h http.Header) (gzipped bool, err error) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				codings = append(codings, f)
			}
		}
	}
	switch {
	case len(codings) == 0:
		return false, nil
	case len(codings) == 1 && strings.EqualFold(codings[0], "identity"):
		return false, nil
	case len(codings) == 1 && strings.EqualFold(codings[0], "gzip"):
		return true, nil
	}
	return false, fmt.Errorf("upstream response is in Content-Encoding %q, which the broker did not ask for and cannot mask; refused", strings.Join(codings, ", "))
}

// lazyGzip decodes gzip once the body turns out not to be empty (a HEAD, 204 or 304
// answer may carry the header with no body).
type lazyGzip struct {
	br *bufio.Reader
	zr *gzip.Reader
}

func (l *lazyGzip) Read(p []byte) (int, error) {
	if l.zr == nil {
		if _, err := l.br.Peek(1); err != nil {
			return 0, err
		}
		zr, err := gzip.NewReader(l.br)
		if err != nil {
			return 0, fmt.Errorf("decoding upstream gzip: %w", err)
		}
		l.zr = zr
	}
	return l.zr.Read(p)
}

// llmTarget checks the request's path and query and builds the upstream URL. The path is
// taken raw, as the client sent it, never from the decoded r.URL.Path, so the upstream
// sees exactly the bytes that were checked; see config.CheckLLMPath for the rule.
func (s *Server) llmTarget(r *http.Request) (string, *url.URL, error) {
	raw := r.URL.EscapedPath()
	if strings.HasPrefix(r.RequestURI, "/") {
		raw, _, _ = strings.Cut(r.RequestURI, "?")
	}
	rest, ok := strings.CutPrefix(raw, "/llm/")
	if !ok {
		return "", nil, fmt.Errorf("path %q is not below /llm/ as sent", raw)
	}
	path := "/" + rest
	if err := config.CheckLLMPath(path); err != nil {
		return "", nil, err
	}
	target := *s.upstream
	target.Path = strings.TrimSuffix(target.Path, "/") + path
	target.RawPath = ""
	target.RawQuery = ""
	target.Fragment = ""
	if q := r.URL.RawQuery; q != "" {
		if len(q) > 2048 {
			return "", nil, fmt.Errorf("query of %d bytes; at most 2048", len(q))
		}
		if strings.Contains(q, ";") {
			return "", nil, errors.New("query has ';'; parameters are separated by '&' only")
		}
		vals, err := url.ParseQuery(q)
		if err != nil {
			return "", nil, fmt.Errorf("query: %v", err)
		}
		for k := range vals {
			n := strings.ToLower(strings.ReplaceAll(k, "_", "-"))
			if strings.Contains(n, "method") || strings.Contains(n, "override") || strings.HasPrefix(n, "-") {
				return "", nil, fmt.Errorf("query parameter %q could override the method or route; refused", k)
			}
			if config.NamesCredential(n) {
				return "", nil, fmt.Errorf("query parameter %q names a credential or account; the broker's key is the only one upstream sees; refused", k)
			}
			if config.NamesRouting(n) {
				return "", nil, fmt.Errorf("query parameter %q could choose where a gateway sends the request (and the key); refused", k)
			}
		}
		target.RawQuery = vals.Encode()
	}
	return path, &target, nil
}

// handleLLM proxies /llm/<rest> to <llm_upstream>/<rest>, adding the API key on the way
// out, for the allowed routes only. Memory per request is bounded: bodies stream through
// a 32 KiB buffer (a JSON answer's head of up to keymask.JoinLimit is read whole), streams and
// lines an SSE parser reads are held at most one frame or line (capped at MaxFrame) plus
// the SSE masker's held frames. Masking of every byte that goes back happens in the jail
// writer (jailwriter.go); the joins across events and values, in llmstream.go.
func (s *Server) handleLLM(w http.ResponseWriter, r *http.Request) {
	if s.upstream == nil {
		jsonError(w, r, http.StatusNotFound, "not_found", "the /llm/ route is off: no llm_upstream with an api_key_file (llm_auth is not api-key)")
		return
	}
	if c := peerCert(r); c != nil && s.noLLM[c.Subject.CommonName] {
		jsonError(w, r, http.StatusForbidden, "role_refused", fmt.Sprintf("agent %s uses llm_auth subscription; the broker's key is not for it", c.Subject.CommonName))
		return
	}
	path, target, err := s.llmTarget(r)
	if err != nil {
		rec(r).Outcome = "refused"
		jsonError(w, r, http.StatusBadRequest, "bad_path", "/llm/ path refused: "+err.Error())
		return
	}
	if !s.routes[r.Method+" "+path] {
		jsonError(w, r, http.StatusForbidden, "route_refused", fmt.Sprintf("%s %s is not an allowed /llm/ route (broker.llm_routes: %s)", r.Method, path, strings.Join(s.opts.LLMRoutes, ", ")))
		return
	}
	// The body policy reads bytes as UTF-8 JSON: a body declared in another charset
	// (utf-7 spells "type" as "t+AHk-pe") could mean something else to the upstream.
	for _, ct := range r.Header.Values("Content-Type") {
		if _, params, err := mime.ParseMediaType(ct); err != nil || (params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8")) {
			jsonError(w, r, http.StatusUnsupportedMediaType, "bad_request", fmt.Sprintf("request Content-Type %q is not accepted; send JSON in UTF-8", ct))
			return
		}
	}
	for _, ce := range r.Header.Values("Content-Encoding") {
		if !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			jsonError(w, r, http.StatusUnsupportedMediaType, "bad_request", fmt.Sprintf("request Content-Encoding %q is not accepted; send the body unencoded", ce))
			return
		}
	}
	if r.ContentLength > s.opts.MaxBody {
		jsonError(w, r, http.StatusRequestEntityTooLarge, "body_cap", fmt.Sprintf("request body of %d bytes exceeds the %s body cap", r.ContentLength, sizeText(s.opts.MaxBody)))
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, s.opts.MaxBody)
	// Every body is read as it passes (bodypolicy): one that would make the upstream
	// reach out on the jail's behalf never reaches it complete.
	var pb *bodypolicy.Body
	if r.ContentLength != 0 {
		pb = bodypolicy.NewBody(body)
		body = pb
	}
	ctx := r.Context()
	if c := peerCert(r); c != nil {
		var done func()
		ctx, done = s.inflight.track(ctx, c)
		defer done()
		r = r.WithContext(ctx)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, target.String(), body)
	if err != nil {
		jsonError(w, r, http.StatusBadRequest, "bad_request", "building upstream request: "+err.Error())
		return
	}
	out.ContentLength = r.ContentLength
	if r.ContentLength == 0 {
		out.Body = http.NoBody
	}
	// An allowlist per API kind (reqheaders.go): a header the list does not name, such
	// as a gateway's routing header, never reaches the upstream; its name is audited.
	rec(r).DroppedHeaders = s.headers.copyTo(out.Header, r.Header)
	// The broker's own choice: gzip, which it decodes itself before masking (the
	// transport's transparent decoding is off, see newUpstreamTransport).
	out.Header.Set("Accept-Encoding", "gzip")
	switch s.opts.AuthHeader {
	case AuthXAPIKey:
		out.Header.Set("X-Api-Key", string(s.apiKey))
	default:
		out.Header.Set("Authorization", "Bearer "+string(s.apiKey))
	}
	resp, err := s.client.Do(out)
	if perr := pb.Refusal(); perr != nil {
		if err == nil {
			resp.Body.Close()
		}
		rec(r).Outcome = "refused"
		jsonError(w, r, http.StatusForbidden, "body_refused", perr.Error())
		return
	}
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case rec(r).bodyTimedOut():
			jsonError(w, r, http.StatusRequestTimeout, "body_timeout", fmt.Sprintf("request body not received within %s", s.opts.BodyTimeout))
		case errors.As(err, &mbe):
			jsonError(w, r, http.StatusRequestEntityTooLarge, "body_cap", fmt.Sprintf("request body exceeds the %s body cap", sizeText(s.opts.MaxBody)))
		default:
			// The error may quote what the upstream sent; the jail writer masks it.
			jsonError(w, r, http.StatusBadGateway, "upstream", "upstream request failed: "+err.Error())
		}
		return
	}
	defer resp.Body.Close()
	gz, err := bodyEncoding(resp.Header)
	if err == nil && len(resp.TransferEncoding) > 0 && !(len(resp.TransferEncoding) == 1 && resp.TransferEncoding[0] == "chunked") {
		err = fmt.Errorf("upstream response has Transfer-Encoding %q; refused", strings.Join(resp.TransferEncoding, ", "))
	}
	if err == nil && resp.StatusCode == http.StatusPartialContent {
		err = errors.New("upstream answered 206 Partial Content to a request without Range; refused")
	}
	if err != nil {
		rec(r).Outcome = "refused"
		jsonError(w, r, http.StatusBadGateway, "upstream_encoding", err.Error())
		return
	}
	var src io.Reader = resp.Body
	if gz {
		src = &lazyGzip{br: bufio.NewReader(resp.Body)}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	if resp.ContentLength > s.opts.MaxBody {
		jsonError(w, r, http.StatusBadGateway, "body_cap", fmt.Sprintf("upstream response body of %d bytes exceeds the %s body cap", resp.ContentLength, sizeText(s.opts.MaxBody)))
		return
	}
	for k, vs := range resp.Header {
		if dropResponse[k] || connectionListed(resp.Header, k) {
			continue
		}
		w.Header()[k] = vs
	}
	rec(r).Detail = "upstream " + strconv.Itoa(resp.StatusCode)
	br := upstreamReaders.Get().(*bufio.Reader)
	br.Reset(src)
	defer func() { br.Reset(nil); upstreamReaders.Put(br) }()
	if isEventStream(resp.Header.Get("Content-Type")) {
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		s.streamSSE(w, r, br)
		return
	}
	// Any other body is masked as an event stream too (streamBody). One that begins as
	// JSON and fits keymask.JoinLimit is first read whole, so the key spread over several of its
	// string values is masked as well; a longer one goes on from where that stopped. A body
	// that does not begin as JSON is not waited for, so a stream labelled as something else
	// still arrives as it comes.
	var head []byte
	whole := false // head is the whole body
	if startsJSON(br) {
		hp := joinBufs.Get().(*[]byte)
		defer joinBufs.Put(hp)
		hn, err := io.ReadFull(br, *hp)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			jsonError(w, r, http.StatusBadGateway, "upstream", "reading upstream response: "+err.Error())
			return
		}
		head, whole = (*hp)[:hn], err != nil
		if hn <= keymask.JoinLimit {
			keymask.MaskJoinedJSON(s.mask, head)
		}
	}
	w.WriteHeader(resp.StatusCode)
	s.streamBody(w, r, head, whole, br)
}

func isEventStream(ct string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
}

func connectionListed(h http.Header, key string) bool {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(f)) == key {
				return true
			}
		}
	}
	return false
}
