package brokerctl

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

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

// joinBufs hold the head of a plain answer (joinLimit, plus one byte to tell a longer one).
var joinBufs = sync.Pool{New: func() any { b := make([]byte, joinLimit+1); return &b }}

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
// a 32 KiB buffer (a JSON answer's head of up to joinLimit is read whole), streams and
// lines an SSE parser reads are held at most one frame or line (capped at MaxFrame) plus
// the SSE masker's held frames. Masking of every byte that goes back happens in the jail
// writer (handler.go); the joins across events and values, here.
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
	// Every body is read as it passes (bodypolicy.go): one that would make the upstream
	// reach out on the jail's behalf never reaches it complete.
	var pb *policyBody
	if r.ContentLength != 0 {
		pb = newPolicyBody(body)
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
	if perr := pb.refusal(); perr != nil {
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
	// JSON and fits joinLimit is first read whole, so the key spread over several of its
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
		if hn <= joinLimit {
			maskJoinedJSON(s.mask, head)
		}
	}
	w.WriteHeader(resp.StatusCode)
	s.streamBody(w, r, head, whole, br)
}

// plainLine is the longest line of a body not labelled text/event-stream that is joined
// with its neighbours as SSE text whatever its field. A longer line an SSE parser ignores
// (a one-line JSON document) streams past the SSE masker, so a large body is never held.
const plainLine = 4 << 10

// startsJSON reports whether the body's first byte after white space is '{' or '[' (or
// all that fits the reader's buffer is white space), the bodies maskJoinedJSON reads. It
// waits only for the bytes it looks at.
func startsJSON(br *bufio.Reader) bool {
	for i := 0; i < br.Size(); i++ {
		b, err := br.Peek(i + 1)
		if err != nil {
			return false
		}
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return true
}

// sseField reports whether an SSE parser acts on a line that begins with line: a data,
// event, id or retry field, or a comment. Any other field it ignores. first: the line
// begins the body, where a byte order mark is skipped.
func sseField(line []byte, first bool) bool {
	if first {
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	}
	// The longest of those names is five bytes, so its colon is within the first six.
	i := bytes.IndexByte(line[:min(len(line), 6)], ':')
	if i < 0 {
		return false
	}
	switch string(line[:i]) {
	case "", "data", "event", "id", "retry":
		return true
	}
	return false
}

// streamBody sends a body that is not labelled text/event-stream, after head (the part
// already read; whole: all of it). An SSE parser accepts any bytes: a line whose field it does not know it
// ignores, wherever it stands, so a client can read any body as an event stream and join
// its events, and nothing in a body's first bytes can rule that out (a sniff of them was
// defeated by a preamble of blank or unknown lines). So every such body is masked as a
// stream too: its lines, in order, go through the SSE masker in units of the complete
// lines at hand, as streamSSE's frames do, with the per-form masking of the jail writer
// on every byte as for any body.
//
// Two kinds of line are not held whole. One an SSE parser ignores that runs past
// plainLine streams through as it comes, with the per-form masking only: the frames held
// before it are released first, their part of a held partial occurrence masked, and the
// masker's text stays, so what follows it still joins. One an SSE parser reads is held
// whole up to MaxFrame, like a frame; past it, and past MaxBody or the masker's channel
// cap, the response is aborted: the status line is gone, and a broken body is the honest
// signal.
func (s *Server) streamBody(w http.ResponseWriter, r *http.Request, head []byte, whole bool, body *bufio.Reader) {
	rc := http.NewResponseController(w)
	src := io.MultiReader(bytes.NewReader(head), io.LimitReader(body, s.opts.MaxBody+1-int64(len(head))))
	sm := &sseMasker{m: s.mask}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	var acc []byte // read, not sent: the start of a line that has not ended
	long := false  // inside a long line an SSE parser ignores, sent as it comes
	var total int64
	abort := func(detail string) {
		rec(r).Detail = detail
		panic(http.ErrAbortHandler)
	}
	write := func(frames ...[]byte) {
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				abort("writing to client: " + err.Error())
			}
		}
	}
	push := func(unit []byte) {
		frames := sm.push(unit)
		if sm.overflow {
			abort(fmt.Sprintf("upstream response has string values under more than %d distinct JSON keys or fields, more than the key masker follows; connection aborted", maxChannels))
		}
		write(frames...)
	}
	for {
		n, err := src.Read(*bp)
		if total += int64(n); total > s.opts.MaxBody {
			abort(fmt.Sprintf("upstream response body exceeds the %s body cap; connection aborted", sizeText(s.opts.MaxBody)))
		}
		p := (*bp)[:n]
		for len(p) > 0 {
			if long {
				end := bytes.IndexAny(p, "\r\n")
				if end < 0 {
					write(p)
					break
				}
				write(p[:end+1])
				p, long = p[end+1:], false
				continue
			}
			// acc holds no line break here (it is empty, or the tail after the last one),
			// so only what this read adds is searched: a line growing towards the frame
			// cap over many reads is not scanned again each time.
			old := len(acc)
			acc = append(acc, p...)
			p = nil
			// Only acc's first line can have grown over several reads; any other lies
			// within this one.
			first := len(acc)
			if i := bytes.IndexAny(acc[old:], "\r\n"); i >= 0 {
				first = old + i
			}
			if int64(first) > s.opts.MaxFrame && sseField(acc, !sm.started) {
				abort(fmt.Sprintf("upstream response line exceeds the %s frame cap; connection aborted", sizeText(s.opts.MaxFrame)))
			}
			if k := bytes.LastIndexAny(acc[old:], "\r\n"); k >= 0 {
				k += old
				push(acc[:k+1]) // push copies it
				acc = append(acc[:0], acc[k+1:]...)
			}
			if len(acc) > plainLine && !sseField(acc, !sm.started) {
				write(sm.release()...)
				sm.started = true // a byte order mark after this is no longer the body's first
				write(acc)
				acc, long = acc[:0], true
			}
		}
		// As in streamSSE: what arrived goes out when the next read could block. A body
		// read whole has nothing left to wait for; it goes out as the handler returns, in
		// one write with its header rather than a write for each.
		if n > 0 && !whole && body.Buffered() == 0 {
			if ferr := rc.Flush(); ferr != nil {
				abort("writing to client: " + ferr.Error())
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			if len(acc) > 0 {
				push(acc)
			}
			write(sm.finish()...)
			return
		case err != nil:
			rec(r).Detail = "copying upstream response: " + err.Error()
			noteRevoked(r)
			panic(http.ErrAbortHandler)
		}
	}
}

// errSSEKeys ends a stream whose text needs more channels than the SSE masker keeps.
var errSSEKeys = errors.New("too many distinct JSON keys in the stream")

// noteRevoked names a revocation in flight as the reason a response was cut.
func noteRevoked(r *http.Request) {
	if cause := context.Cause(r.Context()); errors.Is(cause, errRevokedInFlight) || errors.Is(cause, errExpiredInFlight) {
		rec(r).Detail = cause.Error() + "; response cut"
	}
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

// streamSSE forwards an event stream one complete frame (event) at a time, flushing after
// each unless the next one is already buffered, so the client sees tokens as they come. A
// frame larger than MaxFrame is never forwarded: the client gets an error event naming
// the cap and the stream ends.
func (s *Server) streamSSE(w http.ResponseWriter, r *http.Request, br *bufio.Reader) {
	rc := http.NewResponseController(w)
	var frame bytes.Buffer
	lineStart := true
	sm := &sseMasker{m: s.mask}
	send := func(frames [][]byte) error {
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				return err
			}
		}
		return nil
	}
	emit := func() error {
		if err := send(sm.push(frame.Bytes())); err != nil {
			return err
		}
		if sm.overflow {
			return errSSEKeys
		}
		if frame.Cap() > 1<<20 {
			// Do not keep a large frame's buffer for the life of a long stream.
			frame = bytes.Buffer{}
		} else {
			frame.Reset()
		}
		// Flush whenever the next read could block: every frame reaches the client as soon
		// as no more upstream data is at hand, and frames that arrived together share one
		// TLS record and syscall.
		if br.Buffered() == 0 {
			return rc.Flush()
		}
		return nil
	}
	// Frames still held at the end (a possible start of the key) go out masked.
	drain := func() {
		if send(sm.finish()) == nil {
			rc.Flush()
		}
	}
	// end stops the stream with an error event the client can read, after what is held
	// (masked).
	end := func(typ, msg string) {
		rec(r).Detail = msg
		rec(r).Outcome = typ
		drain()
		fmt.Fprintf(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":%q,\"message\":\"lever broker: %s\"}}\n\n", typ, msg)
		rc.Flush()
	}
	keysMsg := fmt.Sprintf("upstream SSE stream has string values under more than %d distinct JSON keys or fields, more than the key masker follows; stream ended", maxChannels)
	for {
		line, err := br.ReadSlice('\n')
		blank := lineStart && (string(line) == "\n" || string(line) == "\r\n")
		frame.Write(line)
		lineStart = err == nil
		if int64(frame.Len()) > s.opts.MaxFrame {
			end("frame_cap", fmt.Sprintf("upstream SSE frame exceeds the %s frame cap; stream ended", sizeText(s.opts.MaxFrame)))
			return
		}
		if blank {
			if werr := emit(); errors.Is(werr, errSSEKeys) {
				end("sse_keys", keysMsg)
				return
			} else if werr != nil {
				rec(r).Detail = "writing to client: " + werr.Error()
				return
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if frame.Len() > 0 && errors.Is(emit(), errSSEKeys) {
				end("sse_keys", keysMsg)
				return
			}
			drain()
			return
		default:
			rec(r).Detail = "reading upstream stream: " + err.Error()
			noteRevoked(r)
			if frame.Len() > 0 {
				emit()
			}
			drain()
			panic(http.ErrAbortHandler)
		}
	}
}
