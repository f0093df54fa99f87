package brokerctl

import (
	"bytes"
	"io"
)

// maskInPlace overwrites every occurrence of secret in b with '*' of the same length, so
// lengths (and Content-Length) are unchanged.
func maskInPlace(b, secret []byte) {
	if len(secret) == 0 {
		return
	}
	for i := 0; ; {
		j := bytes.Index(b[i:], secret)
		if j < 0 {
			return
		}
		for k := i + j; k < i+j+len(secret); k++ {
			b[k] = '*'
		}
		i += j + len(secret)
	}
}

// redactWriter masks secret in a byte stream, holding back len(secret)-1 bytes so an
// occurrence split across writes is still caught. An upstream that echoes request headers
// (an error page, a debugging proxy) must not hand the API key to the jail.
type redactWriter struct {
	w      io.Writer
	secret []byte
	buf    []byte
}

func (r *redactWriter) Write(p []byte) (int, error) {
	if len(r.secret) == 0 {
		return r.w.Write(p)
	}
	r.buf = append(r.buf, p...)
	maskInPlace(r.buf, r.secret)
	keep := len(r.secret) - 1
	if len(r.buf) > keep {
		n := len(r.buf) - keep
		if _, err := r.w.Write(r.buf[:n]); err != nil {
			return 0, err
		}
		r.buf = append(r.buf[:0], r.buf[n:]...)
	}
	return len(p), nil
}

// Close writes what is held back.
func (r *redactWriter) Close() error {
	if len(r.buf) == 0 {
		return nil
	}
	_, err := r.w.Write(r.buf)
	r.buf = r.buf[:0]
	return err
}
