package bodypolicy

import (
	"errors"
	"io"
	"sync/atomic"
)

// Body passes the request body to the upstream while the scanner reads it: a chunk
// goes on only once scanned, and the last byte only once the end was found clean.
type Body struct {
	src     io.Reader
	sc      bodyScanner
	buf     []byte
	q       []byte // read, scanned, not yet passed on
	srcDone bool
	err     error                       // the policy's refusal, once found
	refused atomic.Pointer[policyError] // the same, for the handler (the transport reads in its own goroutine)
	readErr error                       // the source's own error (not the policy's)
}

// NewBody reads src through the policy.
func NewBody(src io.Reader) *Body {
	return &Body{src: src, buf: make([]byte, 32<<10)}
}

func (b *Body) Read(p []byte) (int, error) {
	for {
		if b.err != nil {
			return 0, b.err
		}
		if b.readErr != nil {
			return 0, b.readErr
		}
		// Pass on everything but the last byte held; all of it once the end was clean.
		avail := len(b.q) - 1
		if b.srcDone {
			avail = len(b.q)
		}
		if avail > 0 {
			n := copy(p, b.q[:avail])
			b.q = b.q[n:]
			return n, nil
		}
		if b.srcDone {
			return 0, io.EOF
		}
		n, err := b.src.Read(b.buf)
		if n > 0 {
			if perr := b.sc.write(b.buf[:n]); perr != nil {
				b.setErr(perr)
				continue
			}
			b.q = append(b.q, b.buf[:n]...)
		}
		switch {
		case errors.Is(err, io.EOF):
			if perr := b.sc.finish(); perr != nil {
				b.setErr(perr)
				continue
			}
			b.srcDone = true
		case err != nil:
			b.readErr = err
		}
	}
}

func (b *Body) setErr(err error) {
	b.err = err
	var pe *policyError
	if errors.As(err, &pe) {
		b.refused.Store(pe)
	}
}

// Refusal is the policy's refusal, if any (nil-safe): the transport reads the body in
// its own goroutine, so the handler asks here rather than through the read's error.
func (b *Body) Refusal() error {
	if b == nil {
		return nil
	}
	if pe := b.refused.Load(); pe != nil {
		return pe
	}
	return nil
}
