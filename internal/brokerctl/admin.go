package brokerctl

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// The admin API listens on host loopback only (CheckLoopback) and, because every local
// user shares loopback, also requires the bearer token in <state>/broker/admin.token
// (mode 0600).

// RevokeRequest names what to revoke: one serial (hex) or every certificate of an agent.
type RevokeRequest struct {
	Serial string `json:"serial,omitempty"`
	Agent  string `json:"agent,omitempty"`
}

// RevokeResponse lists what was revoked.
type RevokeResponse struct {
	Revoked []string `json:"revoked"`
	Agent   string   `json:"agent"`
}

// TicketRequest asks the admin API for an enrolment ticket.
type TicketRequest struct {
	Agent string `json:"agent"`
	Role  string `json:"role"`
	TTL   string `json:"ttl,omitempty"` // Go duration; default 15m
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.state())
	})
	mux.HandleFunc("POST /revoke", func(w http.ResponseWriter, r *http.Request) {
		var req RevokeRequest
		if !decodeJSON(w, r, smallBody, &req) {
			return
		}
		var out RevokeResponse
		var err error
		switch {
		case req.Serial != "" && req.Agent != "":
			jsonError(w, r, http.StatusBadRequest, "bad_request", "give serial or agent, not both")
			return
		case req.Serial != "":
			out.Agent, err = s.CA.RevokeSerial(strings.ToLower(req.Serial))
			out.Revoked = []string{strings.ToLower(req.Serial)}
		case req.Agent != "":
			out.Agent = req.Agent
			out.Revoked, err = s.CA.RevokeAgent(req.Agent)
		default:
			jsonError(w, r, http.StatusBadRequest, "bad_request", "give serial or agent")
			return
		}
		if err != nil {
			jsonError(w, r, http.StatusNotFound, "not_found", err.Error())
			return
		}
		rec(r).Detail = "revoked " + strings.Join(out.Revoked, ",") + " of " + out.Agent
		s.inflight.recheck() // cut its requests in flight now, not at the next tick
		writeJSON(w, out)
	})
	mux.HandleFunc("POST /rotate", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Certs.Refresh(true); err != nil {
			jsonError(w, r, http.StatusInternalServerError, "rotate_failed", err.Error())
			return
		}
		writeJSON(w, s.state())
	})
	mux.HandleFunc("POST /tickets", func(w http.ResponseWriter, r *http.Request) {
		var req TicketRequest
		if !decodeJSON(w, r, smallBody, &req) {
			return
		}
		ttl := time.Duration(0)
		if req.TTL != "" {
			d, err := time.ParseDuration(req.TTL)
			if err != nil || d <= 0 {
				jsonError(w, r, http.StatusBadRequest, "bad_request", fmt.Sprintf("ttl %q is not a positive duration", req.TTL))
				return
			}
			ttl = d
		}
		tok, err := s.Tickets.Issue(req.Agent, req.Role, ttl)
		if err != nil {
			jsonError(w, r, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		rec(r).Detail = "ticket for " + req.Agent + " (" + req.Role + ")"
		writeJSON(w, map[string]string{"ticket": tok})
	})
	return s.audited("admin", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec(r).Who = "admin"
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.adminToken)) != 1 {
			rec(r).Who = "-"
			jsonError(w, r, http.StatusUnauthorized, "unauthenticated", "admin token required (see "+tokenPath(s.opts.StateDir)+")")
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// Admin is a client of a broker's admin API, for the CLI and bring-up.
type Admin struct {
	Addr  string // host:port of the admin listener
	Token string
}

// AdminFor reads the running broker's admin address and token from stateDir.
func AdminFor(stateDir string) (*Admin, error) {
	st, err := Status(stateDir)
	if err != nil {
		return nil, err
	}
	if !st.Running || st.State == nil || st.State.Admin == "" {
		return nil, fmt.Errorf("broker for %s is not running with an admin listener", stateDir)
	}
	tok, err := ca.ReadPrivateFile(tokenPath(stateDir))
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	return &Admin{Addr: st.State.Admin, Token: strings.TrimSpace(string(tok))}, nil
}

func (a *Admin) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+a.Addr+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("broker admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, smallBody))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("broker admin %s: %s", path, e.Error.Message)
		}
		return fmt.Errorf("broker admin %s: %s", path, resp.Status)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Revoke revokes a serial or all of an agent's certificates.
func (a *Admin) Revoke(ctx context.Context, req RevokeRequest) (*RevokeResponse, error) {
	var out RevokeResponse
	return &out, a.do(ctx, http.MethodPost, "/revoke", req, &out)
}

// Rotate re-issues the server certificate now.
func (a *Admin) Rotate(ctx context.Context) (*State, error) {
	var out State
	return &out, a.do(ctx, http.MethodPost, "/rotate", struct{}{}, &out)
}

// Ticket asks the broker for an enrolment ticket for agent in role.
func (a *Admin) Ticket(ctx context.Context, agent, role string, ttl time.Duration) (string, error) {
	var out struct{ Ticket string }
	req := TicketRequest{Agent: agent, Role: role}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	return out.Ticket, a.do(ctx, http.MethodPost, "/tickets", req, &out)
}
