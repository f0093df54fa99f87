package brokerctl

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
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

// audited wraps h so every request leaves one audit line, including one whose handler
// aborted the connection.
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
		r = r.WithContext(context.WithValue(r.Context(), recKey{}, record))
		defer func() {
			p := recover()
			record.Status = cw.status
			record.BytesIn, record.BytesOut = body.n, cw.n
			record.DurationMS = float64(time.Since(start).Microseconds()) / 1000
			if p != nil {
				record.Outcome = "aborted"
			} else if record.Outcome == "" {
				switch {
				case cw.status >= 200 && cw.status < 400:
					record.Outcome = "ok"
				case cw.status == http.StatusUnauthorized || cw.status == http.StatusForbidden:
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
		h.ServeHTTP(cw, r)
	})
}

// jsonError writes {"error":{"type":..., "message":...}} and notes it in the audit record.
// Messages are built by the broker and never include a header value, body or key.
func jsonError(w http.ResponseWriter, r *http.Request, code int, typ, msg string) {
	rec(r).Detail = msg
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": typ, "message": "lever broker: " + msg}})
}

// requirePeer lets a request through only with a verified client certificate from lever's
// CA (verified at the handshake: chain, validity, client-auth usage) that is not revoked.
func (s *Server) requirePeer(h http.HandlerFunc) http.HandlerFunc {
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
		h(w, r)
	}
}

func (s *Server) jailHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /enrol", s.handleEnrol)
	mux.HandleFunc("POST /renew", s.requirePeer(s.handleRenew))
	mux.HandleFunc("GET /healthz", s.requirePeer(s.handleHealth))
	mux.HandleFunc("/llm/", s.requirePeer(s.handleLLM))
	mux.HandleFunc("/", s.requirePeer(func(w http.ResponseWriter, r *http.Request) {
		jsonError(w, r, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path)
	}))
	return s.audited("jail", mux)
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
		msg := "malformed request: " + err.Error()
		if strings.Contains(err.Error(), "too large") {
			msg = "request body exceeds " + sizeText(limit)
		}
		jsonError(w, r, http.StatusBadRequest, "bad_request", msg)
		return false
	}
	return true
}
