package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// CSP is every page's Content-Security-Policy: scripts and styles only from the
// dashboard's own embedded files (no inline script can run, whatever a run wrote), no
// frames, no other origin to talk to.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// CookieName is the session cookie the token is exchanged for.
const CookieName = "lever_dashboard"

// csrfField is the form field (or header, X-CSRF-Token) every POST carries.
const csrfField = "csrf"

// Server is the dashboard's handler. Build it with New once the listener's address is
// known: the Host check needs the exact port.
type Server struct {
	src  Source
	addr string // 127.0.0.1:PORT, the only Host the dashboard answers
	mux  *http.ServeMux

	mu       sync.Mutex
	token    string // the one-time token; "" once exchanged
	sessions map[string]string
}

// NewToken returns a fresh random token (32 bytes, hex).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making the dashboard token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// New builds the handler for a dashboard listening on addr (which must be a loopback
// IPv4 address and port: 127.0.0.1:PORT) that accepts token once.
func New(src Source, addr, token string) (*Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" || port == "" || port == "0" {
		return nil, fmt.Errorf("dashboard address %q: want 127.0.0.1:PORT", addr)
	}
	if len(token) < 32 {
		return nil, errors.New("dashboard token: under 32 characters")
	}
	s := &Server{src: src, addr: addr, token: token, sessions: map[string]string{}}
	s.routes()
	return s, nil
}

// URL is the first URL to open: it carries the one-time token.
func (s *Server) URL() string { return "http://" + s.addr + "/?token=" + s.token }

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.jailPage)
	m.HandleFunc("GET /broker", s.brokerPage)
	m.HandleFunc("GET /runs", s.runsPage)
	m.HandleFunc("GET /runs/{agent}/{id}", s.runPage)
	m.HandleFunc("GET /runs/{agent}/{id}/events", s.eventStream)
	m.HandleFunc("GET /prompts", s.promptsPage)
	m.HandleFunc("POST /prompts/answer", s.answer)
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS)))
	s.mux = m
}

// ServeHTTP checks every request before any page sees it: the Host (a DNS-rebinding
// page's requests carry its own name), the session cookie (or the one-time token on /),
// and for a POST the Origin and the session's CSRF token.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer Chromium sends a form's POST with
	// Origin: null, which the Origin check must refuse.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if r.Host != s.addr {
		http.Error(w, "wrong Host: the dashboard answers only "+s.addr, http.StatusMisdirectedRequest)
		return
	}
	if r.URL.Path == "/" && r.URL.Query().Has("token") {
		s.exchange(w, r)
		return
	}
	csrf, ok := s.session(r)
	if !ok {
		http.Error(w, "no dashboard session: open the URL lever dashboard printed", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if r.Header.Get("Origin") != "http://"+s.addr {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		got := r.Header.Get("X-CSRF-Token")
		if got == "" {
			got = r.PostFormValue(csrfField)
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(csrf)) != 1 {
			http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// exchange trades the one-time token for a session cookie and redirects to / so that
// the token leaves the address bar and the history. A second use is refused.
func (s *Server) exchange(w http.ResponseWriter, r *http.Request) {
	got := r.URL.Query().Get("token")
	s.mu.Lock()
	ok := s.token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) == 1
	var sid, csrf string
	if ok {
		var err1, err2 error
		sid, err1 = NewToken()
		csrf, err2 = NewToken()
		if err := errors.Join(err1, err2); err != nil {
			s.mu.Unlock()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		s.token = ""
		s.sessions[sid] = csrf
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "wrong or used token: start lever dashboard again for a new one", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: sid, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// session returns the request's session's CSRF token.
func (s *Server) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for sid, csrf := range s.sessions {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(sid)) == 1 {
			return csrf, true
		}
	}
	return "", false
}
