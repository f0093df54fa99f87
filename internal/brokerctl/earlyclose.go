package brokerctl

import (
	"net/http"
	"time"
)

// A request answered before its body was read (a 401 without a certificate, a 403, a
// 413, a 415, an upstream that answered early) used to keep its connection until the
// body timeout: net/http reads up to 256 KiB of what is left of the body after the
// handler returns, hoping to reuse the connection, and before writing the header of a
// response that does not close it. A client that dribbles the body holds the slot that
// long. Such a connection is closed right after its answer instead; a request whose body
// was read to its end keeps its connection.

// unread reports whether the request has body bytes the handler never took: it did not
// read to the end, and (when the length was declared) not every declared byte either.
func (d *deadlineBody) unread(declared int64) bool {
	if d.eof.Load() {
		return false
	}
	if c, ok := d.ReadCloser.(*countingBody); ok && declared > 0 && c.n.Load() >= declared {
		return false
	}
	return true
}

// closeAfterAnswer makes net/http close an HTTP/1 connection as soon as the answer is
// written, without reading what is left of the body: it must be called by the handler,
// before it returns, with net/http's own response writer.
//
// The read deadline moves to now, so net/http's read of the rest of the body ends at
// once. http.MaxBytesReader past its limit is the documented way to tell the server to
// close the connection after the reply ("If possible, it tells the ResponseWriter to
// close the connection"): net/http then adds Connection: close, skips the read it does
// before the header, and closes gracefully (its write side first, then the socket after
// a short wait), so the answer is not lost to a reset while the client is still sending.
// HTTP/2 needs none of this: the stream is reset when the handler returns, and a
// connection without a certificate is sent GOAWAY (Connection: close).
func closeAfterAnswer(w http.ResponseWriter, r *http.Request, rc *http.ResponseController) {
	if r.ProtoMajor != 1 {
		return
	}
	rc.SetReadDeadline(time.Now())
	http.MaxBytesReader(w, oneByte{}, 0).Read(make([]byte, 1))
}

// oneByte is a reader that always has a byte: one more than a limit of 0.
type oneByte struct{}

func (oneByte) Read(p []byte) (int, error) { return copy(p, "x"), nil }
func (oneByte) Close() error               { return nil }

// bodyTimeout is how long a request's body may take. A client without a certificate
// can only enrol, whose body is a few KiB (at most certBody): it gets no longer than its
// headers did, not the minutes an agent's model call may need.
func (s *Server) bodyTimeout(r *http.Request) time.Duration {
	if peerCert(r) == nil {
		return min(s.opts.BodyTimeout, s.opts.ReadHeaderTimeout)
	}
	return s.opts.BodyTimeout
}
