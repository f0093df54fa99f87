package brokerctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
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

type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// jailWriter is the response writer every jail route writes through: header names and
// values are masked when the header is sent, and the body passes a masker that works on
// the stream (a key split across writes is still caught). Every write waits at most
// WriteIdleTimeout for the client, so a client that stops reading is cut off while a
// long stream that keeps moving is not.
type jailWriter struct {
	http.ResponseWriter
	rc          *http.ResponseController
	mask        *masker
	stream      *maskStream
	idle        time.Duration
	wroteHeader bool
}

func newJailWriter(w http.ResponseWriter, m *masker, idle time.Duration) *jailWriter {
	jw := &jailWriter{ResponseWriter: w, rc: http.NewResponseController(w), mask: m, idle: idle}
	jw.stream = &maskStream{w: writerFunc(jw.writeOut), m: m}
	return jw
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (jw *jailWriter) writeOut(p []byte) (int, error) {
	jw.rc.SetWriteDeadline(time.Now().Add(jw.idle))
	return jw.ResponseWriter.Write(p)
}

func (jw *jailWriter) WriteHeader(code int) {
	if !jw.wroteHeader {
		jw.wroteHeader = true
		maskHeader(jw.ResponseWriter.Header(), jw.mask)
	}
	jw.ResponseWriter.WriteHeader(code)
}

func (jw *jailWriter) Write(p []byte) (int, error) {
	if !jw.wroteHeader {
		jw.WriteHeader(http.StatusOK)
	}
	return jw.stream.Write(p)
}

// FlushError sends what the masker has released. Bytes it holds back (a possible start
// of the key, never past a line break) wait for the next write or the end.
func (jw *jailWriter) FlushError() error {
	if !jw.wroteHeader {
		jw.WriteHeader(http.StatusOK)
	}
	jw.rc.SetWriteDeadline(time.Now().Add(jw.idle))
	return jw.rc.Flush()
}

func (jw *jailWriter) finish() error { return jw.stream.Close() }

func (jw *jailWriter) Unwrap() http.ResponseWriter { return jw.ResponseWriter }

// maskHeader masks the key in header names and values. They are masked as one run, in
// the order net/http writes them (names sorted, each followed by its values), so a key
// split across two values of one header, or between a name and its value, is found as
// well as one inside a single value. Masking keeps lengths, so the run splits back.
func maskHeader(h http.Header, m *masker) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var run []byte
	for _, k := range keys {
		run = append(run, k...)
		for _, v := range h[k] {
			run = append(run, v...)
		}
	}
	if !m.maskInPlace(run) {
		return
	}
	out := make(http.Header, len(keys))
	off := 0
	for _, k := range keys {
		nk := string(run[off : off+len(k)])
		off += len(k)
		vs := make([]string, len(h[k]))
		for i, v := range h[k] {
			vs[i] = string(run[off : off+len(v)])
			off += len(v)
		}
		out[nk] = append(out[nk], vs...)
	}
	for k := range h {
		delete(h, k)
	}
	for k, vs := range out {
		h[k] = vs
	}
}

// deadlineBody clears the request's read deadline once the body is complete, so the body
// timeout never fires on a connection that is only waiting for a long response (net/http
// cancels the request when a read on its connection times out), and notes a timeout.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	deadline time.Time
	done     atomic.Bool // read to the end (or failed)
	eof      atomic.Bool // read to the end
	timedOut atomic.Bool
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
			d.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
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
				db := &deadlineBody{ReadCloser: body, rc: rc, deadline: time.Now().Add(s.opts.BodyTimeout)}
				rc.SetReadDeadline(db.deadline)
				r.Body = db
				record.body = db
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), recKey{}, record))
		defer func() {
			p := recover()
			if jw != nil && p == nil {
				if err := jw.finish(); err != nil && record.Detail == "" {
					record.Detail = "writing to client: " + err.Error()
				}
			}
			record.Status = cw.status
			record.BytesIn, record.BytesOut = body.n, cw.n
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
// CA (verified at the handshake: chain, validity, client-auth usage) that is not revoked
// and whose role is one of roles.
func (s *Server) requirePeer(route string, roles []string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := peerCert(r)
		if c == nil {
			jsonError(w, r, http.StatusUnauthorized, "unauthenticated", "a client certificate from lever's CA is required for "+r.URL.Path)
			return
		}
		revoked, err := s.CA.IsRevoked(c)
		if err != nil {
			s.opts.Logf("broker: %v", err)
			jsonError(w, r, http.StatusServiceUnavailable, "internal", "revocation state unreadable; refusing")
			return
		}
		if revoked {
			jsonError(w, r, http.StatusForbidden, "revoked", "client certificate "+ca.SerialHex(c.SerialNumber)+" ("+c.Subject.CommonName+") is revoked")
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
	return s.audited("jail", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Requests without a certificate (enrolment, or refusals) are rate limited per
		// source address before anything is parsed, and their connection is closed after
		// the answer (HTTP/2: GOAWAY), so it never idles in a slot the agents need.
		if peerCert(r) == nil {
			w.Header().Set("Connection", "close")
			ip := remoteIP(r.RemoteAddr)
			if !s.unauth.allow(ip) && !s.pendingEnrolment(r) {
				logged, left := s.unauth.logRefusal(ip)
				rec(r).skip = !logged
				w.Header().Set("Retry-After", "1")
				msg := fmt.Sprintf("too many requests without a client certificate from %s (limit %g per second, burst %d)", ip, s.opts.UnauthRate, s.opts.UnauthBurst)
				jsonError(w, r, http.StatusTooManyRequests, "rate_limited", msg)
				if left > 0 {
					rec(r).Detail += fmt.Sprintf("; %d more refused since the last line", left)
				}
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
