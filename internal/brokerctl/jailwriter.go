package brokerctl

import (
	"net/http"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
)

// jailWriter is the response writer every jail route writes through: header names and
// values are masked when the header is sent, and the body passes a masker that works on
// the stream (a key split across writes is still caught). Every write waits at most
// WriteIdleTimeout for the client, so a client that stops reading is cut off while a
// long stream that keeps moving is not.
//
// A client may also read a header's text and the body's first bytes as one run, so the
// header texts that end in a possible start of the key are joined onto the body's first
// bytes (keymask.Stream.Join). When one ends in keymask.MinHold characters or more, the header itself
// waits for the body bytes that complete or break the match (held), so it can be masked
// too; a shorter end goes out at once, as a short partial does in an SSE stream.
type jailWriter struct {
	http.ResponseWriter
	rc          *http.ResponseController
	mask        *keymask.Masker
	stream      *keymask.Stream
	idle        time.Duration
	wroteHeader bool
	held        int             // status of a header waiting for the body's first bytes; 0: none
	hdr         *keymask.Header // the header being held
}

func newJailWriter(w http.ResponseWriter, m *keymask.Masker, idle time.Duration) *jailWriter {
	jw := &jailWriter{ResponseWriter: w, rc: http.NewResponseController(w), mask: m, idle: idle}
	jw.stream = keymask.NewStream(writerFunc(jw.writeOut), m)
	return jw
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (jw *jailWriter) writeOut(p []byte) (int, error) {
	if jw.held != 0 {
		jw.sendHeader()
	}
	jw.rc.SetWriteDeadline(time.Now().Add(jw.idle))
	return jw.ResponseWriter.Write(p)
}

func (jw *jailWriter) WriteHeader(code int) {
	if jw.wroteHeader {
		if jw.held == 0 {
			jw.ResponseWriter.WriteHeader(code) // net/http logs the superfluous call
		}
		return
	}
	jw.wroteHeader = true
	hdr, hold := keymask.MaskHeader(jw.ResponseWriter.Header(), jw.mask)
	jw.stream.Join(hdr)
	if hold {
		jw.held, jw.hdr = code, hdr
		return
	}
	jw.ResponseWriter.WriteHeader(code)
}

// sendHeader sends a held header, with what the body's first bytes showed to be part of
// the key masked (in the block's own bytes, or copied back from a run or line).
func (jw *jailWriter) sendHeader() {
	jw.hdr.WriteTo(jw.ResponseWriter.Header())
	code := jw.held
	jw.held, jw.hdr = 0, nil
	jw.ResponseWriter.WriteHeader(code)
}

func (jw *jailWriter) Write(p []byte) (int, error) {
	if !jw.wroteHeader {
		jw.WriteHeader(http.StatusOK)
	}
	return jw.stream.Write(p)
}

// FlushError sends what the masker has released. Bytes it holds back (a possible start
// of the key, never past a line break) wait for the next write or the end, and so does a
// held header while the body's bytes so far still continue the key: flushing the
// underlying writer would send its header unmasked.
func (jw *jailWriter) FlushError() error {
	if !jw.wroteHeader {
		jw.WriteHeader(http.StatusOK)
	}
	if jw.held != 0 {
		if jw.stream.JoinLive() {
			return nil
		}
		jw.sendHeader()
	}
	jw.rc.SetWriteDeadline(time.Now().Add(jw.idle))
	return jw.rc.Flush()
}

// finish ends the response: a header still held goes out, its part of an occurrence the
// body's end left cut off masked, then what the stream masker holds.
func (jw *jailWriter) finish() error {
	if jw.held != 0 {
		jw.stream.MaskJoinCut()
		jw.sendHeader()
	}
	return jw.stream.Close()
}

func (jw *jailWriter) Unwrap() http.ResponseWriter { return jw.ResponseWriter }
