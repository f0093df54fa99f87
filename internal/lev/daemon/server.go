// Package daemon is lev serve: the HTTP API over the run engine, on loopback by default,
// every route but /api/health behind a bearer token. It also has the client lev's other
// commands use, and the logic that starts the daemon when it is not running.
//
// It owns the HTTP surface and its token check. It must not drive runs or decide tool
// calls itself (the runner and the pipeline do), and must not answer any route but
// /api/health without the bearer token.
package daemon

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/strictjson"
	"github.com/lever-jail/lever/internal/lev/update"
	"github.com/lever-jail/lever/internal/secretfile"
	"github.com/lever-jail/lever/internal/version"
)

// Server serves the API.
type Server struct {
	Engine  *runner.Engine
	Watcher *levconfig.Watcher
	Token   string
	Log     func(format string, args ...any)
	// Update answers GET /api/update from its cache (nil: a checker of SourceURL for
	// this build's version, made on first use).
	Update     *update.Checker
	updateOnce sync.Once
}

// Handler is the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
	})
	mux.HandleFunc("GET /api/agents", s.auth(s.list))
	mux.HandleFunc("POST /api/agents", s.auth(s.spawn))
	mux.HandleFunc("GET /api/agents/{id}", s.auth(s.get))
	mux.HandleFunc("GET /api/agents/{id}/result", s.auth(s.result))
	mux.HandleFunc("GET /api/agents/{id}/events", s.auth(s.events))
	mux.HandleFunc("POST /api/agents/{id}/resume", s.auth(s.resume))
	mux.HandleFunc("POST /api/agents/{id}/answer", s.auth(s.answer))
	mux.HandleFunc("GET /api/config", s.auth(s.config))
	mux.HandleFunc("GET /api/update", s.auth(s.update))
	return mux
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	want := []byte("Bearer " + s.Token)
	return func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if s.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lev"`)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "missing or wrong bearer token"})
			return
		}
		h(w, r)
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	recs, err := s.Engine.List()
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	if recs == nil {
		recs = []*runner.Record{}
	}
	writeJSON(w, http.StatusOK, recs)
}

func (s *Server) spawn(w http.ResponseWriter, r *http.Request) {
	var spec runner.Spec
	data, err := capread.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20), r.ContentLength, 1<<20, "request body", r.RemoteAddr)
	if err == nil {
		// Strict like tool arguments: no key in another case, none twice.
		err = strictjson.Decode(data, &spec)
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("bad spawn request: %w", err))
		return
	}
	rec, err := s.Engine.Start(r.Context(), spec)
	if err != nil {
		writeErr(w, http.StatusUnprocessableEntity, err)
		return
	}
	writeJSON(w, http.StatusCreated, rec)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	rec, err := s.Engine.Load(r.PathValue("id"))
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// Result is GET /api/agents/{id}/result.
type Result struct {
	ID     string          `json:"id"`
	Status runner.Status   `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Label is the run's taint label, which its output and error carry (both went
	// through the taint gate before the run recorded them).
	Label string `json:"label,omitempty"`
}

func (s *Server) result(w http.ResponseWriter, r *http.Request) {
	rec, err := s.Engine.Load(r.PathValue("id"))
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	res := Result{ID: rec.ID, Status: rec.Status, Output: rec.Result, Error: rec.Error, Label: rec.Label}
	code := http.StatusOK
	if rec.Status != runner.StatusCompleted {
		code = http.StatusConflict
		if res.Error == "" {
			res.Error = "run is " + string(rec.Status) + "; no result yet"
		}
	}
	writeJSON(w, code, res)
}

// ResumeRequest is POST /api/agents/{id}/resume's optional body.
type ResumeRequest struct {
	// Interactive: somebody will answer this run's prompts from now on.
	Interactive bool `json:"interactive"`
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	var rr ResumeRequest
	data, err := capread.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10), r.ContentLength, 64<<10, "request body", r.RemoteAddr)
	if err == nil {
		err = strictjson.Decode(data, &rr)
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("bad resume request: %w", err))
		return
	}
	// Pick up a config edited a moment ago without waiting for the next poll.
	if s.Watcher != nil {
		s.Watcher.Check()
	}
	rec, err := s.Engine.Resume(r.Context(), r.PathValue("id"), rr.Interactive)
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// Answer is POST /api/agents/{id}/answer: the answer to an interactive run's question.
type Answer struct {
	Question string `json:"question"`
	Answer   string `json:"answer"` // once | session | deny; an ask_operator question: the operator's text
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	var a Answer
	data, err := capread.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10), r.ContentLength, 64<<10, "request body", r.RemoteAddr)
	if err == nil {
		err = strictjson.Decode(data, &a)
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("bad answer: %w", err))
		return
	}
	if err := s.Engine.Answer(r.PathValue("id"), a.Question, a.Answer); err != nil {
		writeErr(w, http.StatusConflict, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// update is GET /api/update: the cached update check (internal/lev/update). A failed
// check is 502 with its message (a releases answer past the cap names the cap and peer).
func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	s.updateOnce.Do(func() {
		if s.Update == nil {
			s.Update = &update.Checker{Current: version.Version}
		}
	})
	rep, err := s.Update.Cached(r.Context())
	if err != nil {
		writeErr(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) config(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{}
	if s.Watcher != nil {
		c := s.Watcher.Current()
		out["file"] = c.File
		if err := s.Watcher.LastError(); err != nil {
			out["last_reload_error"] = err.Error()
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func statusOf(err error) int {
	if errors.Is(err, runner.ErrNotFound) {
		return http.StatusNotFound
	}
	return http.StatusConflict
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]any{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// CheckListen refuses a non-loopback address unless allowed: lev serve runs LLM-driven
// tools and is for a trusted network only.
func CheckListen(addr string, allowRemote bool) error {
	if _, isUnix, err := SocketPath(addr); isUnix {
		// A unix socket is reached only through the filesystem (mode 0600): never remote.
		return err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if allowRemote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("listen address %q is not loopback; lev serve runs LLM-driven tools, so it listens on loopback unless you pass --allow-remote", addr)
	}
	return nil
}

// ReadToken returns LEV_TOKEN, else the token file's content. The file must be a regular
// file of the user's own, not readable by group or others.
func ReadToken(file string) (string, error) {
	if t := strings.TrimSpace(os.Getenv("LEV_TOKEN")); t != "" {
		return t, nil
	}
	// One open, checked and read on the same descriptor (secretfile): a name checked and
	// then read again could be swapped in between.
	data, err := secretfile.Read(file)
	if pe := (*os.PathError)(nil); errors.As(err, &pe) && errors.Is(pe, os.ErrNotExist) {
		return "", fmt.Errorf("no bearer token: set LEV_TOKEN or write one to %s (%v)", file, pe)
	}
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	t := strings.TrimSpace(string(data))
	if len(t) < 16 {
		return "", fmt.Errorf("token in %s is shorter than 16 characters", file)
	}
	return t, nil
}

// StopGrace is how long a stopping daemon waits for its runs to let go.
const StopGrace = 10 * time.Second

// Serve runs the API on ln until ctx ends, reloading config.toml on change.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.Token == "" {
		return errors.New("refusing to serve without a bearer token")
	}
	if s.Engine == nil {
		return errors.New("refusing to serve without a run engine")
	}
	if err := s.Engine.Validate(); err != nil {
		return err
	}
	if s.Watcher != nil {
		go s.Watcher.Run(ctx, 500*time.Millisecond)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	// Bounded: SIGTERM stops the daemon even if a run's call is stuck.
	s.Engine.StopWithin(StopGrace)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
