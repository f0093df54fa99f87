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
			if !s.unauth.Allow(ip) && !s.pendingEnrolment(r) {
				// At most one line per 10 s; the others are counted (auditthin.go).
				if logged, _ := s.unauth.LogRefusal(ip); !logged {
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
