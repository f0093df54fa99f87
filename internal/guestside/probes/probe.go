package probes

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Probe is one network measurement made from inside the jail's network namespace. Probes
// travel to the guest as JSON on the probe binary's stdin and run in parallel, so the whole
// set costs one guest round-trip and one timeout.
type Probe struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // tcp | udp-dns | tls | loopback
	Addr string `json:"addr,omitempty"`
	// CAPEM is the broker CA for a tls probe; the probe dials by IP without a client
	// certificate.
	CAPEM     string `json:"ca_pem,omitempty"`
	TimeoutMS int    `json:"timeout_ms"`
}

// Outcome is what a probe saw.
type Outcome struct {
	ID string `json:"id"`
	// Result: connected | refused | hostunreach | netunreach | eacces | timeout |
	// answered | error; for tls: the server result after a valid handshake.
	Result    string  `json:"result"`
	Detail    string  `json:"detail,omitempty"`
	ElapsedMS float64 `json:"elapsed_ms"`
	// TLS: the server's certificate validated for the dialed IP.
	CertValid bool `json:"cert_valid,omitempty"`
}

// RunProbes runs every probe concurrently, the plain connection probes first and the TLS
// handshakes after them: "no route to host at once" is judged by its elapsed time, and on a
// slow guest (a TCG-emulated VM) concurrent handshakes' crypto on the same vCPUs delayed a
// local REJECT past the bound.
func RunProbes(ps []Probe) []Outcome {
	out := make([]Outcome, len(ps))
	for _, tls := range []bool{false, true} {
		var wg sync.WaitGroup
		for i, p := range ps {
			if (p.Kind == "tls") != tls {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				o := runProbe(p)
				o.ID = p.ID
				o.ElapsedMS = float64(time.Since(start).Microseconds()) / 1000
				out[i] = o
			}()
		}
		wg.Wait()
	}
	return out
}

func timeout(p Probe) time.Duration {
	if p.TimeoutMS <= 0 {
		return 2 * time.Second
	}
	return time.Duration(p.TimeoutMS) * time.Millisecond
}

func runProbe(p Probe) Outcome {
	switch p.Kind {
	case "tcp":
		c, err := net.DialTimeout("tcp", p.Addr, timeout(p))
		if err == nil {
			c.Close()
			return Outcome{Result: "connected"}
		}
		return Outcome{Result: classify(err), Detail: err.Error()}
	case "udp-dns":
		return dnsProbe(p)
	case "tls":
		return tlsProbe(p)
	case "loopback":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Outcome{Result: "error", Detail: err.Error()}
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.DialTimeout("tcp", l.Addr().String(), timeout(p))
		if err != nil {
			return Outcome{Result: classify(err), Detail: err.Error()}
		}
		c.Close()
		return Outcome{Result: "connected", Detail: l.Addr().String()}
	}
	return Outcome{Result: "error", Detail: "unknown probe kind " + p.Kind}
}

// classify names a connect error by the errno the kernel gave: a REJECT with
// icmp-host-prohibited is EHOSTUNREACH at once, a DROP is a timeout, a missing route is
// ENETUNREACH (which proves nothing about the firewall).
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "hostunreach"
	case errors.Is(err, syscall.ENETUNREACH):
		return "netunreach"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "eacces"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "error"
}

// dnsProbe sends one real DNS query (A, for "lever.invalid.") and waits for any answer.
func dnsProbe(p Probe) Outcome {
	c, err := net.DialTimeout("udp", p.Addr, timeout(p))
	if err != nil {
		return Outcome{Result: classify(err), Detail: err.Error()}
	}
	defer c.Close()
	q := []byte{0x4c, 0x56, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range []string{"lever", "invalid"} {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	c.SetDeadline(time.Now().Add(timeout(p)))
	if _, err := c.Write(q); err != nil {
		return Outcome{Result: classify(err), Detail: err.Error()}
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return Outcome{Result: classify(err), Detail: err.Error()}
	}
	return Outcome{Result: "answered", Detail: fmt.Sprintf("%d bytes", n)}
}

// tlsProbe dials the broker by IP with its CA and no client certificate: the handshake's
// server side must validate for the IP, and the broker must then refuse the request.
func tlsProbe(p Probe) Outcome {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(p.CAPEM)) {
		return Outcome{Result: "error", Detail: "no CA certificate given"}
	}
	host, _, err := net.SplitHostPort(p.Addr)
	if err != nil {
		return Outcome{Result: "error", Detail: err.Error()}
	}
	d := &net.Dialer{Timeout: timeout(p)}
	conn, err := tls.DialWithDialer(d, "tcp", p.Addr, &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})
	if err != nil {
		var ce *tls.CertificateVerificationError
		if errors.As(err, &ce) {
			return Outcome{Result: "cert-invalid", Detail: err.Error()}
		}
		// A server that demands a client certificate may end the handshake itself.
		if strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate") {
			return Outcome{Result: "refused-no-client-cert", CertValid: true, Detail: err.Error()}
		}
		return Outcome{Result: classify(err), Detail: err.Error()}
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout(p)))
	// With TLS 1.3 the server's refusal of a missing certificate arrives after the client
	// handshake returns: make a request and read.
	fmt.Fprintf(conn, "GET /llm/v1/models HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", p.Addr)
	resp, err := http.ReadResponse(bufioReader(conn), nil)
	if err != nil {
		if strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate") {
			return Outcome{Result: "refused-no-client-cert", CertValid: true, Detail: err.Error()}
		}
		return Outcome{Result: "error", CertValid: true, Detail: err.Error()}
	}
	resp.Body.Close()
	if resp.StatusCode == 401 || resp.StatusCode == 403 {
		return Outcome{Result: "refused-no-client-cert", CertValid: true, Detail: resp.Status}
	}
	return Outcome{Result: "served-without-client-cert", CertValid: true, Detail: resp.Status}
}
