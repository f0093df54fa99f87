// Package brokerctl is lever's host-side broker: an mTLS listener where the jail reaches the
// host alias, a /llm/ reverse proxy that adds the API key on the host so the key never
// enters the guest, ticket-based enrolment of agents, a loopback-only admin listener, a
// JSON-lines audit log, and the start/stop/status lifecycle of the broker process.
//
// It owns the broker's files under the instance's state dir (broker/, and the CA through
// internal/cap) and where a ticket may be written on the host (CheckTicketOut). It must
// not parse command lines (internal/cli does); must not let the API key or a token leave
// the host process except towards llm_upstream (never into a response, a log line or the
// audit); must not serve anything on the jail listener to a client the CA did not certify
// (enrolment aside, which redeems a single-use ticket); and must not reach into the guest:
// what runs there is internal/guest's.
package brokerctl

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/config"
)

// Caps shared with lev's providers: the largest response body and SSE frame either side
// reads.
const (
	MaxBody  = 64 << 20
	MaxFrame = 8 << 20
)

// Jail listener defaults. Nothing bounds how long a response may stream (an SSE answer
// can run for many minutes); what is bounded is how long the broker waits for the client.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultWriteIdleTimeout  = 2 * time.Minute
	DefaultMaxConns          = 512
	DefaultUnauthRate        = 2
	DefaultUnauthBurst       = 32
	// Of MaxConns, connections still in their TLS handshake and connections without a
	// client certificate may each hold at most this many, so a client without a
	// certificate cannot take the agents' slots (512 - 64 - 32 stay theirs).
	DefaultMaxPendingHandshakes = 64
	DefaultMaxUnauthConns       = 32
	// An agent renews once every 8 hours; one renewal a minute (burst 5) leaves room for
	// retries and stops a loop from growing the CA registry without bound.
	DefaultRenewRate  = 1.0 / 60
	DefaultRenewBurst = 5
	// One client identity (certificate CN) may hold at most this many connections: lev
	// needs one HTTP/2 connection, or a few over HTTP/1.1, so 32 is generous and 16
	// identities would be needed to take the 512 slots.
	DefaultMaxConnsPerIdentity = 32
	// How often the jail connections are swept for a certificate that expired or was
	// revoked since its handshake (conncheck.go).
	DefaultConnCheckEvery = time.Second
	// Audit lines that a client can repeat at will (refusals, errors, health checks) are
	// thinned per identity, or per source address without a certificate: a burst of 64,
	// then one a second; the left-out lines are counted (auditthin.go).
	DefaultAuditRate  = 1
	DefaultAuditBurst = 64
	// A pending ticket lets an enrolment past the per-address limit of unauthenticated
	// requests; this many failed enrolments with it spend it (enrol.go).
	DefaultMaxEnrolFailures = 5
)

// Auth header styles for the upstream.
const (
	AuthBearer  = "bearer"    // Authorization: Bearer <key> (OpenAI-compatible)
	AuthXAPIKey = "x-api-key" // x-api-key: <key> (Anthropic)
)

// Environment the broker child reads. LEVER_HOST_ALIAS_IP is set by bring-up to the alias
// IP the guest resolved (comma-separated for IPv4 and IPv6).
const (
	EnvAliasIP    = "LEVER_HOST_ALIAS_IP"
	EnvAliasName  = "LEVER_HOST_ALIAS_NAME"
	EnvListen     = "LEVER_BROKER_LISTEN"
	EnvAuthHeader = "LEVER_BROKER_AUTH_HEADER"
)

// Options configure one broker. Listen and the certificate's SANs are separate on purpose:
// on OrbStack and Lima the alias forwards to host 127.0.0.1, so the broker listens there
// while clients dial (and the certificate must name) the guest-side alias IP; on the netns
// substrate the alias is a host address and the broker listens on it.
type Options struct {
	StateDir    string   // instance state dir; CA in <StateDir>/ca, the rest in <StateDir>/broker
	Listen      string   // jail listener host:port
	AdminListen string   // admin listener; must be loopback
	SANNames    []string // DNS SANs (the alias name)
	SANIPs      []net.IP // IP SANs (the alias IP, which agents dial under closed egress)
	Upstream    string   // LLM API base URL; empty disables /llm/
	APIKeyFile  string   // mode 0600, the user's own, one hard link; required when Upstream is set
	// Tree is the jail's tree: an APIKeyFile in it by any spelling is refused (keyfile),
	// since the agents read the tree. Empty: no tree to refuse against.
	Tree       string
	AuthHeader string // AuthBearer or AuthXAPIKey
	// LLMRoutes are the "METHOD /path" requests /llm/ forwards (broker.llm_routes); nil:
	// config.DefaultLLMRoutes of the API kind the auth header implies (x-api-key:
	// anthropic, bearer: openai).
	LLMRoutes []string
	// LLMExtraHeaders are client request headers /llm/ forwards besides the defaults of
	// the API kind (broker.llm_extra_headers; config.DefaultLLMHeaders).
	LLMExtraHeaders []string
	// NoLLMAgents are agents (certificate CNs) that may not use /llm/ at all: workers whose
	// llm_auth is subscription have no business spending the broker's key.
	NoLLMAgents []string

	// Timeouts and caps of the jail listener (zero: the defaults below).
	ReadHeaderTimeout time.Duration // request line and headers
	BodyTimeout       time.Duration // the whole request body, from the end of the headers
	IdleTimeout       time.Duration // a keep-alive connection between requests
	WriteIdleTimeout  time.Duration // longest wait for the client to take one write (a stalled reader is cut; a long stream is not)
	MaxConns          int           // concurrent jail connections; more wait in the kernel's backlog
	UnauthRate        float64       // requests per second per source IP without a client certificate
	UnauthBurst       int           // their burst
	// MaxPendingHandshakes and MaxUnauthConns bound, within MaxConns, the connections
	// still in their handshake and those without a client certificate; when one is full
	// its oldest connection is closed (limits.Listener).
	MaxPendingHandshakes int
	MaxUnauthConns       int
	RenewRate            float64 // renewals per second per agent
	RenewBurst           int     // their burst
	// MaxConnsPerIdentity bounds, within MaxConns, the connections one client certificate
	// CN may hold; beyond it its oldest idle one is closed (limits.Listener).
	MaxConnsPerIdentity int
	// ConnCheckEvery is how often open connections are re-checked for an expired or
	// revoked certificate, and closed when idle (conncheck.go).
	ConnCheckEvery time.Duration
	// AuditRate and AuditBurst thin the repeatable audit lines per identity or source
	// address (auditthin.go); MaxEnrolFailures spends a ticket after that many failed
	// enrolments with it.
	AuditRate        float64
	AuditBurst       int
	MaxEnrolFailures int
	AuditMaxBytes    int64 // audit log rotation size
	AuditKeep        int   // rotated audit files kept

	ClientCertTTL time.Duration
	ServerCertTTL time.Duration
	MaxBody       int64
	MaxFrame      int64
	// UpstreamRoots, when set, replaces the system roots for verifying llm_upstream (a
	// private gateway, or a test's upstream).
	UpstreamRoots *x509.CertPool
	// ListenFunc, when set, replaces net.Listen for both listeners (tests use it to bind
	// inside a network namespace).
	ListenFunc func(network, addr string) (net.Listener, error)
	// Logf receives operational messages (never secrets); nil discards them.
	Logf func(format string, args ...any)
	// Now is the broker's clock for certificate validity (handshake and every request),
	// tickets and issuance; nil: time.Now. Tests move it to expire a certificate.
	Now func() time.Time
}

// Paths under the state dir.
func caDir(state string) string     { return filepath.Join(state, "ca") }
func brokerDir(state string) string { return filepath.Join(state, "broker") }
func ticketDir(state string) string { return filepath.Join(brokerDir(state), "tickets") }
func pidPath(state string) string   { return filepath.Join(brokerDir(state), "broker.pid") }
func statePath(state string) string { return filepath.Join(brokerDir(state), "state.json") }
func auditPath(state string) string { return filepath.Join(brokerDir(state), "audit.jsonl") }
func tokenPath(state string) string { return filepath.Join(brokerDir(state), "admin.token") }
func logPath(state string) string   { return filepath.Join(brokerDir(state), "broker.log") }
func CAPath(state string) string    { return filepath.Join(caDir(state), "ca.crt") }
func TicketDir(state string) string { return ticketDir(state) }
func AuditPath(state string) string { return auditPath(state) }

// DefaultAuthHeader picks x-api-key for Anthropic's API and Bearer for everything else
// (the OpenAI-compatible convention).
func DefaultAuthHeader(upstream string) string {
	u, err := url.Parse(upstream)
	if err == nil && (u.Hostname() == "api.anthropic.com" || strings.HasSuffix(u.Hostname(), ".anthropic.com")) {
		return AuthXAPIKey
	}
	return AuthBearer
}

// CheckLoopback refuses an admin bind address that is not loopback: the admin API revokes
// and rotates credentials and must never be reachable from the jail or the LAN.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("broker admin listener %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		shown := host
		if shown == "" {
			shown = "an empty host (every interface)"
		}
		return fmt.Errorf("broker admin listener %q: %s is not a loopback address; the admin API (revoke, rotate) binds only to 127.0.0.1 or ::1", addr, shown)
	}
	return nil
}

func (o *Options) fill() error {
	if o.StateDir == "" {
		return fmt.Errorf("broker: no state dir")
	}
	if o.Listen == "" {
		return fmt.Errorf("broker: no listen address")
	}
	if o.AdminListen != "" {
		if err := CheckLoopback(o.AdminListen); err != nil {
			return err
		}
	}
	if len(o.SANNames) == 0 && len(o.SANIPs) == 0 {
		return fmt.Errorf("broker: the server certificate needs the alias name or $%s", EnvAliasIP)
	}
	if o.Upstream != "" {
		u, err := url.Parse(o.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("broker: llm_upstream %q is not an http(s) URL", o.Upstream)
		}
		if o.APIKeyFile == "" {
			return fmt.Errorf("broker: llm_upstream is set but api_key_file is not")
		}
	}
	switch o.AuthHeader {
	case "":
		o.AuthHeader = DefaultAuthHeader(o.Upstream)
	case AuthBearer, AuthXAPIKey:
	default:
		return fmt.Errorf("broker: auth header %q is not %s or %s", o.AuthHeader, AuthBearer, AuthXAPIKey)
	}
	if o.LLMRoutes == nil {
		o.LLMRoutes = config.DefaultLLMRoutes(o.apiKind())
	}
	for _, h := range o.LLMExtraHeaders {
		if err := config.CheckLLMHeader(h); err != nil {
			return fmt.Errorf("broker: llm_extra_headers: %w", err)
		}
	}
	for _, r := range o.LLMRoutes {
		if _, _, err := config.ParseLLMRoute(r); err != nil {
			return fmt.Errorf("broker: llm_routes: %w", err)
		}
	}
	defaultPositive(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	defaultPositive(&o.BodyTimeout, DefaultBodyTimeout)
	defaultPositive(&o.IdleTimeout, DefaultIdleTimeout)
	defaultPositive(&o.WriteIdleTimeout, DefaultWriteIdleTimeout)
	defaultPositive(&o.MaxConns, DefaultMaxConns)
	defaultPositive(&o.UnauthRate, DefaultUnauthRate)
	defaultPositive(&o.UnauthBurst, DefaultUnauthBurst)
	defaultPositive(&o.MaxPendingHandshakes, DefaultMaxPendingHandshakes)
	defaultPositive(&o.MaxUnauthConns, DefaultMaxUnauthConns)
	// A quota as large as MaxConns has no effect (Accept never lets more in).
	o.MaxPendingHandshakes = min(o.MaxPendingHandshakes, o.MaxConns)
	o.MaxUnauthConns = min(o.MaxUnauthConns, o.MaxConns)
	defaultPositive(&o.RenewRate, DefaultRenewRate)
	defaultPositive(&o.RenewBurst, DefaultRenewBurst)
	defaultPositive(&o.MaxConnsPerIdentity, DefaultMaxConnsPerIdentity)
	o.MaxConnsPerIdentity = min(o.MaxConnsPerIdentity, o.MaxConns)
	defaultPositive(&o.ConnCheckEvery, DefaultConnCheckEvery)
	defaultPositive(&o.AuditRate, DefaultAuditRate)
	defaultPositive(&o.AuditBurst, DefaultAuditBurst)
	defaultPositive(&o.MaxEnrolFailures, DefaultMaxEnrolFailures)
	if o.Now == nil {
		o.Now = time.Now
	}
	defaultPositive(&o.AuditMaxBytes, DefaultAuditMaxBytes)
	defaultPositive(&o.AuditKeep, DefaultAuditKeep)
	defaultPositive(&o.MaxBody, MaxBody)
	defaultPositive(&o.MaxFrame, MaxFrame)
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// apiKind is the upstream's API kind, which the auth header implies (x-api-key:
// Anthropic, bearer: OpenAI-compatible); it picks the default routes and headers.
func (o *Options) apiKind() string {
	if o.AuthHeader == AuthXAPIKey {
		return config.LLMKindAnthropic
	}
	return config.LLMKindOpenAI
}

// sizeText renders a cap for error messages: "64 MiB".
func sizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// defaultPositive sets *p to def when it is zero or negative: an unset limit takes the
// documented default, never "no limit".
func defaultPositive[T ~int | ~int64 | ~float64](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}
