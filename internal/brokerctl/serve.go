package brokerctl

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
	"github.com/lever-jail/lever/internal/brokerctl/limits"
	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/cap/ticket"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/keyfile"
)

// aliasNames are the alias names each backend's guest resolves to the host.
var aliasNames = map[string]string{
	"orbstack": "host.orb.internal",
	"lima":     "host.lima.internal",
	"netns":    "host.lever.internal",
}

// OptionsFromConfig derives broker options from lever.yaml and the environment bring-up
// sets on the broker child ($LEVER_HOST_ALIAS_IP, optionally $LEVER_HOST_ALIAS_NAME,
// $LEVER_BROKER_LISTEN, $LEVER_BROKER_AUTH_HEADER).
func OptionsFromConfig(cfg *config.Config, getenv func(string) string) (Options, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	o := Options{StateDir: cfg.StateDir(), Tree: cfg.TreePath}
	jailPort, admin := cfg.Broker.JailPort, cfg.Broker.AdminPort
	if jailPort == 0 || admin == 0 {
		return o, fmt.Errorf("broker.jail_port and broker.admin_port must be set (got %d and %d)", jailPort, admin)
	}
	if name := getenv(EnvAliasName); name != "" {
		o.SANNames = []string{name}
	} else if name, ok := aliasNames[cfg.Backend]; ok {
		o.SANNames = []string{name}
	}
	for _, s := range strings.Split(getenv(EnvAliasIP), ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ip := net.ParseIP(s)
		if ip == nil {
			return o, fmt.Errorf("$%s: %q is not an IP address", EnvAliasIP, s)
		}
		o.SANIPs = append(o.SANIPs, ip)
	}
	switch l := getenv(EnvListen); {
	case l != "":
		o.Listen = l
	case cfg.Backend == "netns":
		// On the netns substrate the alias is an address of the host itself.
		if len(o.SANIPs) == 0 {
			return o, fmt.Errorf("backend netns: $%s must name the host-side alias address to listen on", EnvAliasIP)
		}
		o.Listen = net.JoinHostPort(o.SANIPs[0].String(), strconv.Itoa(jailPort))
	default:
		// OrbStack and Lima forward the alias to host loopback.
		o.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(jailPort))
	}
	o.AdminListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(admin))
	if cfg.Broker.LLMAuth != "subscription" {
		o.Upstream = cfg.Broker.LLMUpstream
		o.APIKeyFile = cfg.APIKeyPath()
	}
	o.LLMRoutes = cfg.Broker.LLMRoutes
	o.LLMExtraHeaders = cfg.Broker.LLMExtraHeaders
	for _, w := range cfg.Workers {
		if w.LLMAuth == config.AuthSubscription {
			o.NoLLMAgents = append(o.NoLLMAgents, cfg.Name+"-"+containers.AgentDir(containers.Worker, w.Name))
		}
	}
	o.AuthHeader = getenv(EnvAuthHeader)
	if o.AuthHeader == "" {
		o.AuthHeader = DefaultAuthHeader(o.Upstream)
	}
	return o, nil
}

// Server is a running (or ready to run) broker.
type Server struct {
	opts     Options
	CA       *ca.CA
	Certs    *ca.ServerCertSource
	Tickets  *ticket.Store
	audit    *Audit
	apiKey   []byte
	upstream *url.URL
	client   *http.Client
	mask     *keymask.Masker // finds the API key in every form (keymask)
	routes   map[string]bool // "METHOD /path" allowed below /llm/
	headers  *headerPolicy   // client request headers /llm/ forwards (reqheaders.go)
	noLLM    map[string]bool // agents refused at /llm/
	unauth   *limits.Rate    // requests without a client certificate, per source IP
	hsLog    *limits.Rate    // audit lines for failed TLS handshakes, per source IP
	renewLim *limits.Rate    // renewals per agent
	inflight *inflightSet    // /llm/ requests in flight, re-checked for revocation (inflight.go)
	thin     *auditThinner   // repeatable audit lines, per identity or address (auditthin.go)

	enrolMu    sync.Mutex
	enrolFails map[string]int // failed enrolments per pending ticket (enrol.go)

	adminToken string
	jailLn     net.Listener
	adminLn    net.Listener
	jailSrv    *http.Server
	adminSrv   *http.Server
	started    time.Time
	cancel     context.CancelFunc
	stateMu    sync.Mutex

	// beforeIssue, set only by tests, runs after /renew's peer check and before the CA
	// issues, to land a revocation exactly in that window.
	beforeIssue func(agent string)
}

// New loads (or makes) the CA, mints the server certificate for the configured SANs
// (passing the alias IP from $LEVER_HOST_ALIAS_IP through OptionsFromConfig), reads the
// API key (keyfile: the user's own file, outside the tree) and opens the audit log. It does not listen yet.
func New(opts Options) (*Server, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(brokerDir(opts.StateDir), 0o700); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := os.Chmod(brokerDir(opts.StateDir), 0o700); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s := &Server{opts: opts}
	var err error
	if s.CA, err = ca.LoadOrCreate(caDir(opts.StateDir)); err != nil {
		return nil, err
	}
	if s.Tickets, err = ticket.Open(ticketDir(opts.StateDir)); err != nil {
		return nil, err
	}
	// One clock for issuing, tickets and every validity check (conncheck.go).
	s.CA.Now, s.Tickets.Now = opts.Now, opts.Now
	if opts.Upstream != "" {
		if s.upstream, err = url.Parse(opts.Upstream); err != nil {
			return nil, fmt.Errorf("broker: llm_upstream: %w", err)
		}
		// Checked and read on one descriptor: the user's own file, outside the tree.
		key, err := keyfile.Read(opts.APIKeyFile, opts.Tree)
		if err != nil {
			return nil, fmt.Errorf("broker: api_key_file: %w", err)
		}
		k := strings.TrimSpace(string(key))
		if k == "" || strings.ContainsAny(k, "\r\n") {
			return nil, fmt.Errorf("broker: api_key_file %s must hold exactly one non-empty line", opts.APIKeyFile)
		}
		if len(k) < 8 {
			return nil, fmt.Errorf("broker: api_key_file %s holds %d characters; too short to be an API key", opts.APIKeyFile, len(k))
		}
		s.apiKey = []byte(k)
	}
	s.mask = keymask.New(s.apiKey)
	// Operational messages can quote upstream errors: they are masked like everything else.
	logf := opts.Logf
	s.opts.Logf = func(format string, args ...any) { logf("%s", logSafe(s.mask.String(fmt.Sprintf(format, args...)))) }
	opts.Logf = s.opts.Logf
	s.routes = map[string]bool{}
	for _, r := range opts.LLMRoutes {
		m, p, _ := config.ParseLLMRoute(r)
		s.routes[m+" "+p] = true
	}
	s.headers = newHeaderPolicy(opts.apiKind(), opts.LLMExtraHeaders)
	s.noLLM = map[string]bool{}
	for _, a := range opts.NoLLMAgents {
		s.noLLM[a] = true
	}
	s.unauth = limits.NewRate(opts.UnauthRate, opts.UnauthBurst, 10*time.Second)
	s.hsLog = limits.NewRate(opts.UnauthRate, opts.UnauthBurst, 10*time.Second)
	s.renewLim = limits.NewRate(opts.RenewRate, opts.RenewBurst, 0)
	s.inflight = newInflightSet()
	s.thin = newAuditThinner(opts.AuditRate, opts.AuditBurst, opts.Now)
	s.enrolFails = map[string]int{}
	if s.audit, err = openAudit(auditPath(opts.StateDir), opts.AuditMaxBytes, opts.AuditKeep); err != nil {
		return nil, err
	}
	s.audit.mask = s.mask
	s.audit.logf = s.opts.Logf
	if s.Certs, err = ca.NewServerCertSource(s.CA, opts.SANNames, opts.SANIPs, opts.ServerCertTTL); err != nil {
		s.audit.Close()
		return nil, err
	}
	s.Certs.OnEvent = func(ev string, notAfter time.Time, err error) {
		d := "valid until " + notAfter.UTC().Format(time.RFC3339)
		if err != nil {
			d = err.Error()
			opts.Logf("broker: %v", err)
		}
		s.audit.Log(Record{Who: "broker", Listener: "internal", Route: "server-cert", Outcome: ev, Detail: d})
		s.writeState()
	}
	s.client = &http.Client{
		Transport: newUpstreamTransport(opts.UpstreamRoots),
		// Never follow a redirect: the key would go wherever the upstream points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if s.adminToken, err = loadOrMakeToken(tokenPath(opts.StateDir)); err != nil {
		s.audit.Close()
		return nil, err
	}
	return s, nil
}

func newUpstreamTransport(roots *x509.CertPool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if roots != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	// The broker asks for gzip and decodes it itself (llm.go): the transport must neither
	// add its own Accept-Encoding nor decode behind the broker's back.
	t.DisableCompression = true
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 128
	t.IdleConnTimeout = 90 * time.Second
	// HTTP/1.1 to upstream, one pooled connection per request in flight: Go's HTTP/2
	// client hands every request and frame between goroutines, which cost ~0.1 ms of the
	// broker's kept-alive overhead (BenchmarkBrokerOverhead, floor-keepalive: 0.18 ms over
	// HTTP/2, 0.07 ms over HTTP/1.1), and lets each stream buffer what a slow jail client
	// has not read yet. Over HTTP/1.1 that waits in the socket, under TCP flow control.
	var p http.Protocols
	p.SetHTTP1(true)
	t.Protocols = &p
	return t
}

func loadOrMakeToken(path string) (string, error) {
	if data, err := ca.ReadPrivateFile(path); err == nil {
		if t := strings.TrimSpace(string(data)); len(t) >= 32 {
			return t, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("broker: admin token: %w", err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	t := hex.EncodeToString(raw[:])
	if err := ca.WriteFileAtomic(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("broker: admin token: %w", err)
	}
	return t, nil
}

// TLSConfig is the jail listener's TLS configuration: TLS 1.3, the rotating server
// certificate, and client certificates verified against lever's CA when presented. A
// client with no certificate still completes the handshake so it can reach /enrol; every
// other route refuses it (requirePeer).
func (s *Server) TLSConfig() *tls.Config {
	base := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: s.Certs.GetCertificate,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      s.CA.Pool(),
		NextProtos:     []string{"h2", "http/1.1"},
		// The chain's validity is checked against the broker's clock, and a revoked
		// certificate never completes a handshake (conncheck.go).
		Time:             s.opts.Now,
		VerifyConnection: s.verifyPeer,
	}
	// Each connection of the jail listener reports the end of its handshake to the
	// listener's quotas (limits.Listener): with a verified certificate it joins its identity's,
	// without one the quota of unauthenticated connections.
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		lc, ok := hello.Conn.(*limits.Conn)
		if !ok {
			return nil, nil
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if err := s.verifyPeer(cs); err != nil {
				return err
			}
			if leaf := leafOf(cs); !lc.Handshook(leaf) {
				return fmt.Errorf("client identity %s already holds %d connections, all serving requests (the per-identity connection cap)", leaf.Subject.CommonName, s.opts.MaxConnsPerIdentity)
			}
			return nil
		}
		return c, nil
	}
	return base
}

// maxStreams is the most concurrent requests one HTTP/2 connection may carry.
const maxStreams = 64

// Start binds both listeners and serves in the background.
func (s *Server) Start() error {
	listen := s.opts.ListenFunc
	if listen == nil {
		listen = net.Listen
	}
	ln, err := listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("broker: listening on %s: %w", s.opts.Listen, err)
	}
	jailLn := limits.NewListener(quickAckListener{ln}, s.opts.MaxConns, s.opts.MaxPendingHandshakes, s.opts.MaxUnauthConns, s.opts.MaxConnsPerIdentity)
	s.jailLn = jailLn
	if s.opts.AdminListen != "" {
		if s.adminLn, err = listen("tcp", s.opts.AdminListen); err != nil {
			ln.Close()
			return fmt.Errorf("broker: admin listener on %s: %w", s.opts.AdminListen, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.started = time.Now()
	s.jailSrv = &http.Server{
		Handler:           s.jailHandler(),
		TLSConfig:         s.TLSConfig(),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		// No ReadTimeout or WriteTimeout: either would end a long SSE answer. The body
		// has its own deadline (audited), and every write one of its own (jailWriter).
		IdleTimeout:    s.opts.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       log.New(&serverLog{s: s}, "", 0),
		// With the connection cap, this bounds the requests in flight over HTTP/2 too.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
		// The connection quotas never evict a connection serving a request.
		ConnState: jailLn.ConnState,
	}
	go s.jailSrv.ServeTLS(s.jailLn, "", "")
	if s.adminLn != nil {
		s.adminSrv = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		go s.adminSrv.Serve(s.adminLn)
	}
	go s.Certs.Run(ctx, time.Minute)
	go s.inflight.run(ctx, s.inflightRefusal)
	go s.checkConns(ctx, jailLn)
	go s.thin.run(ctx, s.audit)
	s.audit.Log(Record{Who: "broker", Listener: "internal", Route: "start", Outcome: "listening", Detail: fmt.Sprintf("jail %s admin %s", s.JailAddr(), s.AdminAddr())})
	return s.writeState()
}

// JailAddr is the jail listener's bound address.
func (s *Server) JailAddr() string {
	if s.jailLn == nil {
		return ""
	}
	return s.jailLn.Addr().String()
}

// AdminAddr is the admin listener's bound address ("" when none).
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Shutdown stops accepting, lets in-flight requests finish until ctx ends, and removes the
// state file.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.cancel != nil {
		s.cancel()
	}
	var errs []error
	if s.jailSrv != nil {
		errs = append(errs, s.jailSrv.Shutdown(ctx))
	}
	if s.adminSrv != nil {
		errs = append(errs, s.adminSrv.Shutdown(ctx))
	}
	s.thin.flush(s.audit, true)
	s.audit.Log(Record{Who: "broker", Listener: "internal", Route: "stop", Outcome: "stopped"})
	os.Remove(statePath(s.opts.StateDir))
	errs = append(errs, s.audit.Close())
	return errors.Join(errs...)
}

// Serve runs a broker until ctx is done: what `lever broker serve` runs, in the
// foreground or as the detached child of Start. It holds the pid file while it runs.
func Serve(ctx context.Context, opts Options) error {
	if err := opts.fill(); err != nil {
		return err
	}
	release, err := claimPidFile(opts.StateDir)
	if err != nil {
		return err
	}
	defer release()
	s, err := New(opts)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		s.audit.Close()
		return err
	}
	if len(opts.SANIPs) == 0 {
		opts.Logf("broker: warning: no IP SAN ($%s unset): agents that cannot resolve %v (closed egress drops DNS) will fail TLS", EnvAliasIP, opts.SANNames)
	}
	opts.Logf("broker: listening on %s (admin %s), server certificate valid until %s", s.JailAddr(), s.AdminAddr(), s.Certs.Current().Leaf.NotAfter.UTC().Format(time.RFC3339))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// State is what a running broker publishes in <state>/broker/state.json.
type State struct {
	PID                int       `json:"pid"`
	Listen             string    `json:"listen"`
	Admin              string    `json:"admin,omitempty"`
	SANNames           []string  `json:"san_names,omitempty"`
	SANIPs             []string  `json:"san_ips,omitempty"`
	Started            time.Time `json:"started"`
	ServerCertSerial   string    `json:"server_cert_serial"`
	ServerCertNotAfter time.Time `json:"server_cert_not_after"`
	CAFingerprint      string    `json:"ca_sha256"`
	LLM                bool      `json:"llm"`
}

func (s *Server) state() State {
	leaf := s.Certs.Current().Leaf
	st := State{
		PID: os.Getpid(), Listen: s.JailAddr(), Admin: s.AdminAddr(), SANNames: s.opts.SANNames,
		Started: s.started.UTC(), ServerCertSerial: ca.SerialHex(leaf.SerialNumber),
		ServerCertNotAfter: leaf.NotAfter.UTC(), CAFingerprint: s.CA.Fingerprint(), LLM: s.upstream != nil,
	}
	for _, ip := range s.opts.SANIPs {
		st.SANIPs = append(st.SANIPs, ip.String())
	}
	return st
}

func (s *Server) writeState() error {
	if s.jailLn == nil {
		return nil
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	data, err := json.MarshalIndent(s.state(), "", "  ")
	if err != nil {
		return err
	}
	return ca.WriteFileAtomic(statePath(s.opts.StateDir), data, 0o600)
}

// peerCert is the verified client certificate of r, or nil.
func peerCert(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	return r.TLS.VerifiedChains[0][0]
}

// serverLog receives net/http's own messages. TLS handshake failures (no or bad client
// certificate, wrong CA, expired) are refusals worth an audit line; anything else goes to
// the operational log.
type serverLog struct{ s *Server }

func (l *serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(msg, "http: TLS handshake error from "); ok {
		remote, detail, _ := strings.Cut(rest, ": ")
		// Anyone can fail a handshake as often as they like: the lines are thinned per
		// source address like other unauthenticated refusals.
		// Past the burst, one line per 10 s; the others are counted (auditthin.go).
		ip := remoteIP(remote)
		r := Record{Listener: "jail", Route: "tls-handshake", Outcome: "refused", Remote: remote, Detail: detail}
		if !l.s.hsLog.Allow(ip) {
			if logged, _ := l.s.hsLog.LogRefusal(ip); !logged {
				l.s.thin.drop(&r)
				return len(p), nil
			}
		}
		l.s.thin.admit(&r)
		l.s.audit.Log(r)
		return len(p), nil
	}
	// Other net/http messages (a malformed request, an HTTP/2 preface error) can also be
	// provoked by any client: capped and thinned like handshake lines.
	if !l.s.hsLog.Allow("server-log") {
		logged, left := l.s.hsLog.LogRefusal("server-log")
		if !logged {
			return len(p), nil
		}
		msg += fmt.Sprintf(" (%d similar messages left out)", left)
	}
	l.s.opts.Logf("broker: %s", capText(msg, capDetail))
	return len(p), nil
}
