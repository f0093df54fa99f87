package brokerctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

type recKey struct{}

// rec returns the audit record of the request in flight, for handlers to annotate.
func rec(r *http.Request) *Record {
	if v, ok := r.Context().Value(recKey{}).(*Record); ok {
		return v
	}
	return &Record{}
}

// countingWriter counts bytes and remembers the status; Unwrap lets
// http.ResponseController reach Flush on the real writer.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// countingBody counts the request body's bytes for the audit record. The count is atomic:
// the upstream transport may read the body's end on its own goroutine after the handler
// has returned, while audited's deferred function reads the count.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// jailWriter is the response writer every jail route writes through: header names and
// values are masked when the header is sent, and the body passes a masker that works on
// the stream (a key split across writes is still caught). Every write waits at most
// WriteIdleTimeout for the client, so a client that stops reading is cut off while a
// long stream that keeps moving is not.
//
// A client may also read a header's text and the body's first bytes as one run, so the
// header texts that end in a possible start of the key are joined onto the body's first
// bytes (maskStream.join). When one ends in minHold characters or more, the header itself
// waits for the body bytes that complete or break the match (held), so it can be masked
// too; a shorter end goes out at once, as a short partial does in an SSE stream.
type jailWriter struct {
	http.ResponseWriter
	rc          *http.ResponseController
	mask        *masker
	stream      *maskStream
	idle        time.Duration
	wroteHeader bool
	held        int       // status of a header waiting for the body's first bytes; 0: none
	block       *hdrBlock // the header being held
	joins       []hdrText // header texts joined onto the body's first bytes
}

func newJailWriter(w http.ResponseWriter, m *masker, idle time.Duration) *jailWriter {
	jw := &jailWriter{ResponseWriter: w, rc: http.NewResponseController(w), mask: m, idle: idle}
	jw.stream = &maskStream{w: writerFunc(jw.writeOut), m: m}
	return jw
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (jw *jailWriter) writeOut(p []byte) (int, error) {
	if jw.held != 0 {
		jw.sendHeader()
	}
	jw.rc.SetWriteDeadline(time.Now().Add(jw.idle))
	return jw.ResponseWriter.Write(p)
}

func (jw *jailWriter) WriteHeader(code int) {
	if jw.wroteHeader {
		if jw.held == 0 {
			jw.ResponseWriter.WriteHeader(code) // net/http logs the superfluous call
		}
		return
	}
	jw.wroteHeader = true
	block, runs := maskHeader(jw.ResponseWriter.Header(), jw.mask)
	joins, hold := block.cutTexts(jw.mask, runs)
	for _, t := range joins {
		jw.stream.join = append(jw.stream.join, t.b)
	}
	jw.joins = joins
	if hold {
		jw.held, jw.block = code, block
		return
	}
	jw.ResponseWriter.WriteHeader(code)
}

// sendHeader sends a held header, with what the body's first bytes showed to be part of
// the key masked (in the block's own bytes, or copied back from a run or line).
func (jw *jailWriter) sendHeader() {
	for _, t := range jw.joins {
		jw.block.put(t.refs, t.b)
	}
	jw.block.writeTo(jw.ResponseWriter.Header())
	code := jw.held
	jw.held, jw.block, jw.joins = 0, nil, nil
	jw.ResponseWriter.WriteHeader(code)
}

func (jw *jailWriter) Write(p []byte) (int, error) {
	if !jw.wroteHeader {
		jw.WriteHeader(http.StatusOK)
	}
	return jw.stream.Write(p)
}

// FlushError sends what the masker has released. Bytes it holds back (a possible start
// of the key, never past a line break) wait for the next write or the end, and so does a
// held header while the body's bytes so far still continue the key: flushing the
// underlying writer would send its header unmasked.
func (jw *jailWriter) FlushError() error {
	if !jw.wroteHeader {
		jw.WriteHeader(http.StatusOK)
	}
	if jw.held != 0 {
		if jw.stream.joinLive(minHold) {
			return nil
		}
		jw.sendHeader()
	}
	jw.rc.SetWriteDeadline(time.Now().Add(jw.idle))
	return jw.rc.Flush()
}

// finish ends the response: a header still held goes out, its part of an occurrence the
// body's end left cut off masked, then what the stream masker holds.
func (jw *jailWriter) finish() error {
	if jw.held != 0 {
		jw.stream.maskJoinCut(minHold)
		jw.sendHeader()
	}
	return jw.stream.Close()
}

func (jw *jailWriter) Unwrap() http.ResponseWriter { return jw.ResponseWriter }

// hdrBlock is a header as the jail receives it: names sorted, as net/http writes them,
// each with its values, as bytes that masking overwrites in place.
type hdrBlock struct {
	names [][]byte
	vals  [][][]byte
}

// segRef is one name (v < 0) or value of a hdrBlock.
type segRef struct{ h, v int }

// hdrText is a run of names and values a client could read as one text.
type hdrText struct {
	refs []segRef
	b    []byte
}

// newHdrBlock copies h into one buffer (this runs for every response).
func newHdrBlock(h http.Header) *hdrBlock {
	keys := slices.Sorted(maps.Keys(h))
	size, nvals := 0, 0
	for _, k := range keys {
		size += len(k)
		for _, v := range h[k] {
			size += len(v)
		}
		nvals += len(h[k])
	}
	buf := make([]byte, 0, size)
	vals := make([][]byte, 0, nvals)
	b := &hdrBlock{names: make([][]byte, len(keys)), vals: make([][][]byte, len(keys))}
	// Each piece is cut with its capacity at its end, so no append can run into the next.
	piece := func(s string) []byte {
		buf = append(buf, s...)
		return buf[len(buf)-len(s) : len(buf) : len(buf)]
	}
	for i, k := range keys {
		b.names[i] = piece(k)
		from := len(vals)
		for _, v := range h[k] {
			vals = append(vals, piece(v))
		}
		b.vals[i] = vals[from:len(vals):len(vals)]
	}
	return b
}

func (b *hdrBlock) seg(r segRef) []byte {
	if r.v < 0 {
		return b.names[r.h]
	}
	return b.vals[r.h][r.v]
}

func (b *hdrBlock) text(refs []segRef) hdrText {
	n := 0
	for _, r := range refs {
		n += len(b.seg(r))
	}
	t := hdrText{refs: refs, b: make([]byte, 0, n)}
	for _, r := range refs {
		t.b = append(t.b, b.seg(r)...)
	}
	return t
}

// put copies the masked bytes of a text back into its segments, and reports whether
// that masked anything. Only '*' is copied, so texts that share a segment never undo
// each other's masking.
func (b *hdrBlock) put(refs []segRef, t []byte) bool {
	changed, off := false, 0
	for _, r := range refs {
		s := b.seg(r)
		for k := range s {
			if t[off+k] == '*' && s[k] != '*' {
				s[k], changed = '*', true
			}
		}
		off += len(s)
	}
	return changed
}

// writeTo replaces h's contents with the block's (a masked name may now equal another).
func (b *hdrBlock) writeTo(h http.Header) {
	clear(h)
	for i, n := range b.names {
		k := string(n)
		for _, v := range b.vals[i] {
			h[k] = append(h[k], string(v))
		}
	}
}

// runs are the orders in which a client could run the whole header together: as it is
// written (each name followed by its values), the values alone, the names alone.
func (b *hdrBlock) runs() []hdrText {
	nv := 0
	for _, vs := range b.vals {
		nv += len(vs)
	}
	wire := make([]segRef, 0, len(b.names)+nv)
	vals := make([]segRef, 0, nv)
	names := make([]segRef, 0, len(b.names))
	for i := range b.names {
		wire = append(wire, segRef{i, -1})
		names = append(names, segRef{i, -1})
		for j := range b.vals[i] {
			wire = append(wire, segRef{i, j})
			vals = append(vals, segRef{i, j})
		}
	}
	return []hdrText{b.text(wire), b.text(vals), b.text(names)}
}

// cutTexts returns the texts a client could put right before the body that end in a
// possible start of the key (masker.cutAt), and whether one ends in minHold characters or
// more of it. The candidates: the runs (as masked), and any one header line (its name
// and values), name or value, since which header comes last is up to the server
// (net/http appends Date and Content-Length after the sorted ones) and the client.
//
// This runs for every response, and many a header ends in one character that could
// start the key ("application/json": base64 of the key can start with n), so nothing is
// copied that need not be: a name or value is joined in place (its text is the block's
// own bytes, so masking it masks the header), and a run or line only when its partial
// starts before its last segment, since one inside that segment is the segment's own.
func (b *hdrBlock) cutTexts(m *masker, runs []hdrText) (out []hdrText, hold bool) {
	consider := func(t hdrText, last int, keep func(hdrText) hdrText) {
		i := m.cutAt(t.b, 1, false)
		if i < 0 || (len(t.refs) > 1 && i >= len(t.b)-last) {
			return
		}
		out = append(out, keep(t))
		hold = hold || m.cutAt(t.b, minHold, false) >= 0
	}
	as := func(t hdrText) hdrText { return t }
	inPlace := func(t hdrText) hdrText { return hdrText{b: t.b} }
	copied := func(t hdrText) hdrText { return hdrText{refs: slices.Clone(t.refs), b: bytes.Clone(t.b)} }
	for _, t := range runs {
		if len(t.refs) > 0 {
			consider(t, len(b.seg(t.refs[len(t.refs)-1])), as)
		}
	}
	var line hdrText
	for i := range b.names {
		consider(hdrText{b: b.names[i]}, 0, inPlace)
		line.b = append(line.b[:0], b.names[i]...)
		line.refs = append(line.refs[:0], segRef{i, -1})
		for j, v := range b.vals[i] {
			consider(hdrText{b: v}, 0, inPlace)
			line.b = append(line.b, v...)
			line.refs = append(line.refs, segRef{i, j})
		}
		consider(line, len(b.seg(line.refs[len(line.refs)-1])), copied)
	}
	return out, hold
}

// maskHeader masks the key in header names and values. Each of the runs (hdrBlock.runs)
// is masked as one text, so a key split across two values of one header or of two
// headers, between a name and its value, or across names is found as well as one inside
// a single value. Masking keeps lengths, so each run splits back. It returns the block
// and its runs, masked, for the join with the body.
func maskHeader(h http.Header, m *masker) (*hdrBlock, []hdrText) {
	b := newHdrBlock(h)
	runs := b.runs()
	changed := false
	for _, t := range runs {
		if m.maskInPlace(t.b) {
			changed = b.put(t.refs, t.b) || changed
		}
	}
	if changed {
		b.writeTo(h)
		runs = b.runs() // each shows what the others masked too
	}
	return b, runs
}

// deadlineBody clears the request's read deadline once the body is complete, so the body
// timeout never fires on a connection that is only waiting for a long response (net/http
// cancels the request when a read on its connection times out), and notes a timeout.
//
// The last read can come after the handler has returned: the upstream transport's
// goroutine that copies the body upstream reads on until the body ends, and an upstream
// that answers without reading it lets the handler return first. The response controller
// must not be used then (on HTTP/2 net/http has released the stream's writer, and the
// call dereferenced nil: a panic that took the whole broker down, reachable by any
// client). ended, under mu, is set by audited as the handler returns; a read after it
// leaves the connection's deadline to net/http, which is done with the request.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	deadline time.Time
	done     atomic.Bool // read to the end (or failed)
	eof      atomic.Bool // read to the end
	timedOut atomic.Bool

	mu    sync.Mutex
	ended bool // the handler has returned
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if err == io.EOF {
		d.eof.Store(true)
	}
	if err != nil && d.done.CompareAndSwap(false, true) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			d.timedOut.Store(true)
		} else {
			d.mu.Lock()
			if !d.ended {
				d.rc.SetReadDeadline(time.Time{})
			}
			d.mu.Unlock()
		}
	}
	return n, err
}

// handlerReturned marks the handler as returned (audited's deferred call): no later read
// touches the response controller. A read clearing the deadline right now finishes first.
func (d *deadlineBody) handlerReturned() {
	d.mu.Lock()
	d.ended = true
	d.mu.Unlock()
}

// bodyTimedOut says whether the request's body missed its deadline. net/http may cancel
// the request (on the connection's read timeout) before the body read reports it, and the
// read may then fail with the cancellation rather than the deadline, so a body that had
// not reached its end by its deadline counts too, however its last read failed.
func (r *Record) bodyTimedOut() bool {
	if r.body == nil {
		return false
	}
	return r.body.timedOut.Load() || (!r.body.eof.Load() && !time.Now().Before(r.body.deadline))
}

// audited wraps h so every request leaves one audit line, including one whose handler
// aborted the connection. On the jail listener it also masks every byte written and
// bounds how long the request body may take.
func (s *Server) audited(listener string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		record := &Record{Time: start, Listener: listener, Method: r.Method, Route: r.URL.Path, Remote: r.RemoteAddr}
		if c := peerCert(r); c != nil {
			record.Who = c.Subject.CommonName
			record.Serial = ca.SerialHex(c.SerialNumber)
			record.peer = c.Subject.CommonName
		}
		cw := &countingWriter{ResponseWriter: w}
		body := &countingBody{ReadCloser: r.Body}
		r.Body = body
		var out http.ResponseWriter = cw
		var jw *jailWriter
		if listener == "jail" {
			jw = newJailWriter(cw, s.mask, s.opts.WriteIdleTimeout)
			out = jw
			// A request without a body has nothing to time out, and a read deadline left
			// on its connection would cancel the response it is waiting for.
			if r.ContentLength != 0 {
				rc := http.NewResponseController(w)
				db := &deadlineBody{ReadCloser: body, rc: rc, deadline: time.Now().Add(s.bodyTimeout(r))}
				rc.SetReadDeadline(db.deadline)
				r.Body = db
				record.body = db
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), recKey{}, record))
		defer func() {
			p := recover()
			if record.body != nil {
				record.body.handlerReturned()
				if record.body.unread(r.ContentLength) {
					closeAfterAnswer(w, r, record.body.rc) // earlyclose.go
				}
			}
			if jw != nil && p == nil {
				if err := jw.finish(); err != nil && record.Detail == "" {
					record.Detail = "writing to client: " + err.Error()
				}
			}
			record.Status = cw.status
			record.BytesIn, record.BytesOut = body.n.Load(), cw.n
			record.DurationMS = float64(time.Since(start).Microseconds()) / 1000
			if p != nil {
				record.Outcome = "aborted"
			} else if record.Outcome == "" {
				switch {
				case cw.status >= 200 && cw.status < 400:
					record.Outcome = "ok"
				case cw.status == http.StatusUnauthorized || cw.status == http.StatusForbidden || cw.status == http.StatusTooManyRequests:
					record.Outcome = "refused"
				default:
					record.Outcome = "error"
				}
			}
			s.thin.admit(record)
			if err := s.audit.Log(*record); err != nil {
				s.opts.Logf("broker: audit log: %v", err)
			}
			if p != nil {
				panic(p)
			}
		}()
		h.ServeHTTP(out, r)
	})
}

// maxMessage caps an error message: a message may quote client input.
const maxMessage = 1024

// jsonError writes {"error":{"type":..., "message":...}} and notes it in the audit record.
// The jail writer masks it like every other byte; the message is capped because it may
// quote what the client sent.
func jsonError(w http.ResponseWriter, r *http.Request, code int, typ, msg string) {
	msg = capText(msg, maxMessage)
	rec(r).Detail = msg
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": typ, "message": "lever broker: " + msg}})
}

// requirePeer lets a request through only with a verified client certificate from lever's
// CA (verified at the handshake: chain, validity, client-auth usage) that is, at this
// request, still within its validity period and not revoked, and whose role is one of
// roles.
func (s *Server) requirePeer(route string, roles []string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := peerCert(r)
		if c == nil {
			jsonError(w, r, http.StatusUnauthorized, "unauthenticated", "a client certificate from lever's CA is required for "+r.URL.Path)
			return
		}
		// The handshake checked the certificate once; the connection may have outlived
		// its validity or its revocation since (keep-alive, HTTP/2). It is refused, and its
		// connection closed after this answer (HTTP/2: GOAWAY), as it would be at a new
		// handshake.
		if e := s.peerRefusal(c); e != nil {
			w.Header().Set("Connection", "close")
			jsonError(w, r, e.code, e.typ, e.msg)
			return
		}
		role := ca.Role(c)
		if !slices.Contains(roles, role) {
			jsonError(w, r, http.StatusForbidden, "role_refused", fmt.Sprintf("%s is not open to role %q of %s (allowed: %s)", route, role, c.Subject.CommonName, strings.Join(roles, ", ")))
			return
		}
		h(w, r)
	}
}

// jailRoute is one row of the jail listener's route table. roles nil means the route
// takes no client certificate (enrolment, authorised by its ticket instead); every
// other route names the roles whose certificates may use it. A request that matches no
// row is refused (404 with a certificate, 401 without).
type jailRoute struct {
	pattern string
	roles   []string
	h       http.HandlerFunc
}

func (s *Server) jailRoutes() []jailRoute {
	both := []string{ca.RoleManager, ca.RoleWorker}
	return []jailRoute{
		{"POST /enrol", nil, s.handleEnrol},
		{"POST /renew", both, s.handleRenew},
		{"GET /healthz", both, s.handleHealth},
		// /llm/ admits both roles; handleLLM then checks the route allowlist and refuses
		// an agent whose llm_auth is subscription (NoLLMAgents).
		{"/llm/", both, s.handleLLM},
	}
}

func (s *Server) jailHandler() http.Handler {
	mux := http.NewServeMux()
	var llm http.Handler
	for _, rt := range s.jailRoutes() {
		h := rt.h
		if rt.roles != nil {
			h = s.requirePeer(rt.pattern, rt.roles, rt.h)
		}
		mux.HandleFunc(rt.pattern, h)
		if rt.pattern == "/llm/" {
			llm = h
		}
	}
	mux.HandleFunc("/", s.requirePeer("/", []string{ca.RoleManager, ca.RoleWorker}, func(w http.ResponseWriter, r *http.Request) {
		jsonError(w, r, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path)
	}))
	return s.audited("jail", s.checkedPeer(func(w http.ResponseWriter, r *http.Request) {
		// Requests without a certificate (enrolment, or refusals) are rate limited per
		// source address before anything is parsed, and their connection is closed after
		// the answer (HTTP/2: GOAWAY), so it never idles in a slot the agents need.
		if peerCert(r) == nil {
			w.Header().Set("Connection", "close")
			ip := remoteIP(r.RemoteAddr)
			if !s.unauth.allow(ip) && !s.pendingEnrolment(r) {
				// At most one line per 10 s; the others are counted (auditthin.go).
				if logged, _ := s.unauth.logRefusal(ip); !logged {
					s.thin.drop(rec(r))
				}
				w.Header().Set("Retry-After", "1")
				msg := fmt.Sprintf("too many requests without a client certificate from %s (limit %g per second, burst %d)", ip, s.opts.UnauthRate, s.opts.UnauthBurst)
				jsonError(w, r, http.StatusTooManyRequests, "rate_limited", msg)
				return
			}
		}
		// Everything below /llm/ as sent goes to the proxy's own path checks: the mux would
		// clean "/llm/./x" or "/llm//x" into a redirect first, and match on the decoded path.
		if strings.HasPrefix(r.RequestURI, "/llm/") {
			llm.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// pendingEnrolment reports whether r is an enrolment carrying a ticket that is still
// pending. Every jail process shares one source address, so the per-address limit of
// unauthenticated requests is shared too: without this, any process in the jail could
// spend it and keep an agent that holds a ticket from enrolling. The body (at most
// certBody, under the body deadline) is read here and put back for handleEnrol.
func (s *Server) pendingEnrolment(r *http.Request) bool {
	if r.Method != http.MethodPost || r.URL.Path != "/enrol" {
		return false
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, certBody+1))
	r.Body = io.NopCloser(bytes.NewReader(data))
	if err != nil || len(data) > certBody {
		return false
	}
	var req EnrolRequest
	return json.Unmarshal(data, &req) == nil && s.Tickets.Pending(req.Ticket)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	c := peerCert(r)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"status": "ok", "agent": c.Subject.CommonName, "role": ca.Role(c),
		"client_cert_not_after":  c.NotAfter.UTC(),
		"server_cert_not_after":  s.Certs.Current().Leaf.NotAfter.UTC(),
		"llm":                    s.upstream != nil,
		"client_cert_serial_hex": ca.SerialHex(c.SerialNumber),
	})
}

// decodeJSON reads a small JSON request body strictly.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if rec(r).bodyTimedOut() || errors.Is(err, os.ErrDeadlineExceeded) {
			jsonError(w, r, http.StatusRequestTimeout, "body_timeout", "request body not received within the body timeout")
			return false
		}
		msg := "malformed request: " + err.Error()
		if strings.Contains(err.Error(), "too large") {
			msg = "request body exceeds " + sizeText(limit)
		}
		jsonError(w, r, http.StatusBadRequest, "bad_request", msg)
		return false
	}
	return true
}
