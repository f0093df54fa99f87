package bench

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The channel is authenticated, not trusted by its path. At each start the server makes
// a fresh key (KeyFile, beside the socket, in the directory that no command and no `lever
// shell` session can reach: Hide, lev bench shell), and every answer carries a proof: an
// HMAC under that key of the exact request line (which holds the client's fresh nonce) and
// of the answer itself. lev refuses an answer whose proof does not verify, so a server
// that is not this start's (something that took the socket's place, an old one, one
// relaying to the real server and changing "network": false on the way) is refused and
// nothing it says is used. `lever up` asks the same proof of every agent's channel (Ping)
// and restarts a workbench whose channel does not give it.

// KeyFile is the key's name in the socket's directory.
const KeyFile = "key"

// keyLen is the key's size in bytes (hex in the file).
const keyLen = 32

// keyPath is the key file beside socket.
func keyPath(socket string) string { return filepath.Join(filepath.Dir(socket), KeyFile) }

// NewKey makes this start's key beside socket: written whole under a temporary name and
// renamed over any older one, mode 0600.
func NewKey(socket string) ([]byte, error) {
	key := make([]byte, keyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("bench key: %w", err)
	}
	p := keyPath(socket)
	tmp := p + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench key: %w", err)
	}
	_, werr := f.Write([]byte(hex.EncodeToString(key) + "\n"))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, p)
	}
	if werr != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("bench key: %w", werr)
	}
	return key, nil
}

// ReadKey reads the key beside socket: a regular file (not a link) holding 64 hex digits.
func ReadKey(socket string) ([]byte, error) {
	p := keyPath(socket)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("the workbench's channel key %s: %w", p, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the workbench's channel key %s is not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, 2*keyLen+2))
	if err != nil {
		return nil, fmt.Errorf("the workbench's channel key %s: %w", p, err)
	}
	key, err := hex.DecodeString(strings.TrimSuffix(string(b), "\n"))
	if err != nil || len(key) != keyLen {
		return nil, fmt.Errorf("the workbench's channel key %s is not %d hex bytes", p, keyLen)
	}
	return key, nil
}

// proof is the HMAC of the request line and the answer (its JSON without the proof).
func proof(key, reqLine []byte, resp Response) (string, error) {
	resp.Proof = ""
	body, err := json.Marshal(resp)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "lever-bench-proof-v1\x00%d\x00", len(reqLine))
	m.Write(reqLine)
	m.Write([]byte{0})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil)), nil
}

// sign sets resp's proof for the request line.
func sign(key, reqLine []byte, resp *Response) {
	if key == nil {
		return
	}
	if p, err := proof(key, reqLine, *resp); err == nil {
		resp.Proof = p
	}
}

// NotTheBenchError is an answer that did not prove itself: not this start's server.
type NotTheBenchError struct {
	Socket string
	Why    string
}

func (e *NotTheBenchError) Error() string {
	return fmt.Sprintf("the answer at %s is not the workbench's (%s): something other than this start's lev bench serve is at the socket (or the workbench restarted during the call); nothing it said is used, and no command of this call is known to have run; `lever up` repairs the channel", e.Socket, e.Why)
}

// verify checks resp's proof for the request line under key.
func verify(socket string, key, reqLine []byte, resp Response) error {
	if resp.Proof == "" {
		return &NotTheBenchError{socket, "it carries no proof"}
	}
	want, err := proof(key, reqLine, resp)
	if err != nil {
		return err
	}
	got, err := hex.DecodeString(resp.Proof)
	w, _ := hex.DecodeString(want)
	if err != nil || !hmac.Equal(got, w) {
		return &NotTheBenchError{socket, "its proof does not match this start's key"}
	}
	return nil
}

// nonce is a fresh random hex string for a request.
func nonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", errors.New("bench: no randomness for a request nonce")
	}
	return hex.EncodeToString(b), nil
}
