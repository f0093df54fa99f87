package doctor

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc writes a /proc entry: comm, cmdline (NUL-separated), the main thread's
// children and the status Uid line.
func fakeProc(t *testing.T, dir, pid, comm string, args []string, children string) {
	t.Helper()
	p := filepath.Join(dir, pid)
	os.MkdirAll(filepath.Join(p, "task", pid), 0o755)
	os.WriteFile(filepath.Join(p, "comm"), []byte(comm+"\n"), 0o644)
	os.WriteFile(filepath.Join(p, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644)
	os.WriteFile(filepath.Join(p, "task", pid, "children"), []byte(children), 0o644)
	os.WriteFile(filepath.Join(p, "status"), []byte("Name:\t"+comm+"\nUid:\t0\t0\t0\t0\n"), 0o644)
}

// TestLeftovers: only an exec session's conmon (--exec-attach) with an exit delay and no
// child left is a leftover; a container's conmon, a session still running its command and
// a conmon without a delay or with lever's own 10 s (about to exit) are not.
func TestLeftovers(t *testing.T) {
	proc := t.TempDir()
	exec := []string{"/usr/bin/conmon", "--api-version", "1", "-e", "--exec-attach", "--exit-delay", "300"}
	fakeProc(t, proc, "100", "conmon", exec, "")                                              // leftover
	fakeProc(t, proc, "101", "conmon", exec, "102 ")                                          // still running its command
	fakeProc(t, proc, "103", "conmon", []string{"/usr/bin/conmon", "--api-version", "1"}, "") // a container's conmon
	fakeProc(t, proc, "104", "conmon", exec[:5], "")                                          // no delay
	fakeProc(t, proc, "105", "sleep", exec, "")                                               // not conmon
	fakeProc(t, proc, "106", "conmon", append(exec[:6:6], "10"), "")                          // lever's delay
	os.MkdirAll(filepath.Join(proc, "self"), 0o755)
	ps, err := HostProbe{ProcDir: proc}.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].PID != 100 || ps[0].User != "root" {
		t.Errorf("leftovers %+v, want only pid 100 (root)", ps)
	}
}

func certFile(t *testing.T, notAfter time.Time) string {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, NotBefore: notAfter.Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	return p
}

// TestReadCert: a certificate's end as written; a missing file is "not made yet", a file
// with no certificate in it is an error naming it.
func TestReadCert(t *testing.T) {
	end := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if c := ReadCert(certFile(t, end)); !c.NotAfter.Equal(end) || c.Err != "" || c.Missing {
		t.Errorf("valid: %+v", c)
	}
	if c := ReadCert(filepath.Join(t.TempDir(), "none.crt")); !c.Missing {
		t.Errorf("missing: %+v", c)
	}
	bad := filepath.Join(t.TempDir(), "bad.crt")
	os.WriteFile(bad, []byte("not a certificate"), 0o644)
	if c := ReadCert(bad); c.Err == "" || !strings.Contains(c.Err, bad) {
		t.Errorf("garbage: %+v", c)
	}
}

// TestFreeBytesOfAStateDirNotMadeYet: the free space of a state dir that does not exist
// yet is its nearest existing parent's.
func TestFreeBytesOfAStateDirNotMadeYet(t *testing.T) {
	d := t.TempDir()
	n, err := HostProbe{}.FreeBytes(filepath.Join(d, "a", "b"))
	if err != nil || n == 0 {
		t.Fatalf("free %d, %v", n, err)
	}
}
