package imagebuild

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/levimage"
)

// fetchEnv, set, makes the test binary (which is /lev in the trees the tests make: the
// helper puts its own executable there) run lev's web_fetch on the URL it names and exit.
const fetchEnv = "LEVER_IMAGEBUILD_TEST_WEB_FETCH"

func TestMain(m *testing.M) {
	if u := os.Getenv(fetchEnv); u != "" {
		os.Exit(webFetch(u))
	}
	os.Exit(m.Run())
}

type allowGate struct{}

func (allowGate) Check(context.Context, *pipeline.Call) (pipeline.Decision, error) {
	return pipeline.Decision{Allow: true, Source: "test"}, nil
}
func (allowGate) Observe(context.Context, *pipeline.Call, *pipeline.Result) {}

// webFetch runs web_fetch through lev's pipeline with the client lev's runs use
// (provider.NewHTTPClient without a private CA: the system roots, which Go reads from
// /etc/ssl/certs/ca-certificates.crt).
func webFetch(u string) int {
	client, err := provider.NewHTTPClient(provider.TLSFiles{}, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	p := &pipeline.Pipeline{Perms: &pipeline.Permissions{Yolo: true}, Gate: allowGate{}, HTTP: client}
	args, _ := json.Marshal(map[string]string{"url": u})
	_, res := p.Handle(context.Background(), pipeline.Stage{Name: "fetch", Tools: []string{"web_fetch"}}, provider.ToolCall{ID: "1", Name: "web_fetch", Args: args})
	fmt.Print(res.Content)
	if res.IsError {
		return 1
	}
	return 0
}

// testCA makes a CA and a server certificate it signed for 127.0.0.1.
func testCA(t *testing.T) (caPEM []byte, server tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lever test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestLevTreeVerifiesHTTPS: lev's tree carries the guest's CA roots, so web_fetch run from
// the tree (chrooted into it, as its container's root) verifies a real TLS server whose CA
// the guest trusts. The server's own CA is installed in a stand-in guest exactly where
// Debian's ca-certificates puts it (levimage.CABundle), and the helper makes lev's tree
// from that guest. Controls: a guest without the bundle, and a guest trusting another CA,
// give trees whose web_fetch refuses the same server as unknown authority.
func TestLevTreeVerifiesHTTPS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the trees are root's and the fetch is chrooted into one: run as root")
	}
	caPEM, cert := testCA(t)
	otherPEM, _ := testCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "verified page")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	cases := []struct {
		name   string
		bundle []byte // the stand-in guest's CABundle; nil: none
		ok     bool
		want   string
	}{
		{"guest trusts the server's CA", caPEM, true, "HTTP 200\nverified page"},
		{"guest has no CA bundle", nil, false, "certificate signed by unknown authority"},
		{"guest trusts another CA", otherPEM, false, "certificate signed by unknown authority"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.Chmod(root, 0o755)
			if tc.bundle != nil {
				p := filepath.Join(root, levimage.CABundle)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, tc.bundle, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tree := filepath.Join(t.TempDir(), "trees", fmt.Sprintf("lev-%d", i))
			if resp := ask(t, root, Request{LevDir: tree}); resp.Lev == nil || resp.Lev.Found {
				t.Fatalf("lev's tree was not made: %+v", resp)
			}
			got, err := os.ReadFile(filepath.Join(tree, levimage.CABundle))
			if tc.bundle == nil {
				if err == nil {
					t.Fatalf("a tree from a guest without roots has %s", levimage.CABundle)
				}
			} else if string(got) != string(tc.bundle) {
				t.Fatalf("the tree's %s is not the guest's: %q (err %v)", levimage.CABundle, got, err)
			}
			cmd := exec.Command("/lev")
			cmd.Dir = "/"
			cmd.Env = []string{fetchEnv + "=" + srv.URL + "/page"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: tree}
			out, err := cmd.CombinedOutput()
			if tc.ok != (err == nil) || !strings.Contains(string(out), tc.want) {
				t.Fatalf("web_fetch in the tree: err %v, output %q; want ok=%v and %q", err, out, tc.ok, tc.want)
			}
		})
	}
}
