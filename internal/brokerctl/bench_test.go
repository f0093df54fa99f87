package brokerctl

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// BenchmarkLLM compares, in one run and against one upstream (TLS, HTTP/1.1 or h2 as
// negotiated), calling the upstream directly with going through the broker's /llm/
// (client mTLS to the broker, the broker's pooled connection to upstream). "reuse" keeps
// connections alive; "handshake" makes a new TLS connection for every request (for the
// broker: a full mTLS handshake with a client certificate). Reported: p50-ms, p99-ms and
// req/s over each sub-benchmark's requests; "c8" runs 8 clients concurrently.
func BenchmarkLLM(b *testing.B) {
	h := newHarness(b, loadUpstream(), nil)
	cert := h.workerCert("bench")
	upRoots := x509.NewCertPool()
	upRoots.AddCert(h.upstream.Certificate())
	for _, kind := range []string{"small", "stream"} {
		for _, conn := range []string{"reuse", "handshake"} {
			for _, conc := range []int{1, 8} {
				for _, path := range []string{"direct", "broker"} {
					name := fmt.Sprintf("%s/%s/c%d/%s", kind, conn, conc, path)
					b.Run(name, func(b *testing.B) {
						var c *http.Client
						url := h.url + "/llm/" + kind
						if path == "direct" {
							c = clientFor(upRoots, nil, conn == "reuse")
							url = h.upstream.URL + "/v1base/" + kind
						} else {
							c = clientFor(h.srv.CA.Pool(), &cert, conn == "reuse")
						}
						defer c.CloseIdleConnections()
						// Warm the pools so "reuse" measures reuse.
						if err := loadOne(context.Background(), c, url, kind); err != nil {
							b.Fatal(err)
						}
						runLatency(b, conc, func() error { return loadOne(context.Background(), c, url, kind) })
					})
				}
			}
		}
	}
}

func runLatency(b *testing.B, conc int, do func() error) {
	lat := make([]time.Duration, 0, b.N)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{}, b.N)
	for i := 0; i < b.N; i++ {
		next <- struct{}{}
	}
	close(next)
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				t0 := time.Now()
				if err := do(); err != nil {
					b.Error(err)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		i := int(float64(len(lat)-1) * p)
		return float64(lat[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
}
