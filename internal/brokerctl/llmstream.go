package brokerctl

// The two ways an upstream answer goes back to the jail: an event stream frame by frame
// (streamSSE), and any other body line by line (streamBody), both through the SSE masker
// (keymask.SSE) so that a key spread over events or lines is caught.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
)

// plainLine is the longest line of a body not labelled text/event-stream that is joined
// with its neighbours as SSE text whatever its field. A longer line an SSE parser ignores
// (a one-line JSON document) streams past the SSE masker, so a large body is never held.
const plainLine = 4 << 10

// startsJSON reports whether the body's first byte after white space is '{' or '[' (or
// all that fits the reader's buffer is white space), the bodies keymask.MaskJoinedJSON reads. It
// waits only for the bytes it looks at.
func startsJSON(br *bufio.Reader) bool {
	for i := 0; i < br.Size(); i++ {
		b, err := br.Peek(i + 1)
		if err != nil {
			return false
		}
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return true
}

// sseField reports whether an SSE parser acts on a line that begins with line: a data,
// event, id or retry field, or a comment. Any other field it ignores. first: the line
// begins the body, where a byte order mark is skipped.
func sseField(line []byte, first bool) bool {
	if first {
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	}
	// The longest of those names is five bytes, so its colon is within the first six.
	i := bytes.IndexByte(line[:min(len(line), 6)], ':')
	if i < 0 {
		return false
	}
	switch string(line[:i]) {
	case "", "data", "event", "id", "retry":
		return true
	}
	return false
}

// streamBody sends a body that is not labelled text/event-stream, after head (the part
// already read; whole: all of it). An SSE parser accepts any bytes: a line whose field it does not know it
// ignores, wherever it stands, so a client can read any body as an event stream and join
// its events, and nothing in a body's first bytes can rule that out (a sniff of them was
// defeated by a preamble of blank or unknown lines). So every such body is masked as a
// stream too: its lines, in order, go through the SSE masker in units of the complete
// lines at hand, as streamSSE's frames do, with the per-form masking of the jail writer
// on every byte as for any body.
//
// Two kinds of line are not held whole. One an SSE parser ignores that runs past
// plainLine streams through as it comes, with the per-form masking only: the frames held
// before it are released first, their part of a held partial occurrence masked, and the
// masker's text stays, so what follows it still joins. One an SSE parser reads is held
// whole up to MaxFrame, like a frame; past it, and past MaxBody or the masker's channel
// cap, the response is aborted: the status line is gone, and a broken body is the honest
// signal.
func (s *Server) streamBody(w http.ResponseWriter, r *http.Request, head []byte, whole bool, body *bufio.Reader) {
	rc := http.NewResponseController(w)
	src := io.MultiReader(bytes.NewReader(head), io.LimitReader(body, s.opts.MaxBody+1-int64(len(head))))
	sm := keymask.NewSSE(s.mask)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	var acc []byte // read, not sent: the start of a line that has not ended
	long := false  // inside a long line an SSE parser ignores, sent as it comes
	var total int64
	abort := func(detail string) {
		rec(r).Detail = detail
		panic(http.ErrAbortHandler)
	}
	write := func(frames ...[]byte) {
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				abort("writing to client: " + err.Error())
			}
		}
	}
	push := func(unit []byte) {
		frames := sm.Push(unit)
		if sm.Overflow() {
			abort(fmt.Sprintf("upstream response has string values under more than %d distinct JSON keys or fields, more than the key masker follows; connection aborted", keymask.MaxChannels))
		}
		write(frames...)
	}
	for {
		n, err := src.Read(*bp)
		if total += int64(n); total > s.opts.MaxBody {
			abort(fmt.Sprintf("upstream response body exceeds the %s body cap; connection aborted", sizeText(s.opts.MaxBody)))
		}
		p := (*bp)[:n]
		for len(p) > 0 {
			if long {
				end := bytes.IndexAny(p, "\r\n")
				if end < 0 {
					write(p)
					break
				}
				write(p[:end+1])
				p, long = p[end+1:], false
				continue
			}
			// acc holds no line break here (it is empty, or the tail after the last one),
			// so only what this read adds is searched: a line growing towards the frame
			// cap over many reads is not scanned again each time.
			old := len(acc)
			acc = append(acc, p...)
			p = nil
			// Only acc's first line can have grown over several reads; any other lies
			// within this one.
			first := len(acc)
			if i := bytes.IndexAny(acc[old:], "\r\n"); i >= 0 {
				first = old + i
			}
			if int64(first) > s.opts.MaxFrame && sseField(acc, !sm.Started()) {
				abort(fmt.Sprintf("upstream response line exceeds the %s frame cap; connection aborted", sizeText(s.opts.MaxFrame)))
			}
			if k := bytes.LastIndexAny(acc[old:], "\r\n"); k >= 0 {
				k += old
				push(acc[:k+1]) // push copies it
				acc = append(acc[:0], acc[k+1:]...)
			}
			if len(acc) > plainLine && !sseField(acc, !sm.Started()) {
				write(sm.Release()...)
				sm.MarkStarted() // a byte order mark after this is no longer the body's first
				write(acc)
				acc, long = acc[:0], true
			}
		}
		// As in streamSSE: what arrived goes out when the next read could block. A body
		// read whole has nothing left to wait for; it goes out as the handler returns, in
		// one write with its header rather than a write for each.
		if n > 0 && !whole && body.Buffered() == 0 {
			if ferr := rc.Flush(); ferr != nil {
				abort("writing to client: " + ferr.Error())
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			cutIfRevoked(r)
			if len(acc) > 0 {
				push(acc)
			}
			write(sm.Finish()...)
			return
		case err != nil:
			rec(r).Detail = "copying upstream response: " + err.Error()
			noteRevoked(r)
			panic(http.ErrAbortHandler)
		}
	}
}

// cutIfRevoked aborts the response of a request the watcher cancelled (its certificate
// revoked or expired in flight) when the upstream body then reads as ended: the transport
// can report the cancelled read as a clean end of the body, and the response must not
// then finish as if whole, with an audit line that says "upstream 200".
func cutIfRevoked(r *http.Request) {
	if cause := context.Cause(r.Context()); errors.Is(cause, errRevokedInFlight) || errors.Is(cause, errExpiredInFlight) {
		rec(r).Detail = cause.Error() + "; response cut"
		panic(http.ErrAbortHandler)
	}
}

// errSSEKeys ends a stream whose text needs more channels than the SSE masker keeps.
var errSSEKeys = errors.New("too many distinct JSON keys in the stream")

// noteRevoked names a revocation in flight as the reason a response was cut.
func noteRevoked(r *http.Request) {
	if cause := context.Cause(r.Context()); errors.Is(cause, errRevokedInFlight) || errors.Is(cause, errExpiredInFlight) {
		rec(r).Detail = cause.Error() + "; response cut"
	}
}

// streamSSE forwards an event stream one complete frame (event) at a time, flushing after
// each unless the next one is already buffered, so the client sees tokens as they come. A
// frame larger than MaxFrame is never forwarded: the client gets an error event naming
// the cap and the stream ends.
func (s *Server) streamSSE(w http.ResponseWriter, r *http.Request, br *bufio.Reader) {
	rc := http.NewResponseController(w)
	var frame bytes.Buffer
	lineStart := true
	sm := keymask.NewSSE(s.mask)
	send := func(frames [][]byte) error {
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				return err
			}
		}
		return nil
	}
	emit := func() error {
		if err := send(sm.Push(frame.Bytes())); err != nil {
			return err
		}
		if sm.Overflow() {
			return errSSEKeys
		}
		if frame.Cap() > 1<<20 {
			// Do not keep a large frame's buffer for the life of a long stream.
			frame = bytes.Buffer{}
		} else {
			frame.Reset()
		}
		// Flush whenever the next read could block: every frame reaches the client as soon
		// as no more upstream data is at hand, and frames that arrived together share one
		// TLS record and syscall.
		if br.Buffered() == 0 {
			return rc.Flush()
		}
		return nil
	}
	// Frames still held at the end (a possible start of the key) go out masked.
	drain := func() {
		if send(sm.Finish()) == nil {
			rc.Flush()
		}
	}
	// end stops the stream with an error event the client can read, after what is held
	// (masked).
	end := func(typ, msg string) {
		rec(r).Detail = msg
		rec(r).Outcome = typ
		drain()
		fmt.Fprintf(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":%q,\"message\":\"lever broker: %s\"}}\n\n", typ, msg)
		rc.Flush()
	}
	keysMsg := fmt.Sprintf("upstream SSE stream has string values under more than %d distinct JSON keys or fields, more than the key masker follows; stream ended", keymask.MaxChannels)
	for {
		line, err := br.ReadSlice('\n')
		blank := lineStart && (string(line) == "\n" || string(line) == "\r\n")
		frame.Write(line)
		lineStart = err == nil
		if int64(frame.Len()) > s.opts.MaxFrame {
			end("frame_cap", fmt.Sprintf("upstream SSE frame exceeds the %s frame cap; stream ended", sizeText(s.opts.MaxFrame)))
			return
		}
		if blank {
			if werr := emit(); errors.Is(werr, errSSEKeys) {
				end("sse_keys", keysMsg)
				return
			} else if werr != nil {
				rec(r).Detail = "writing to client: " + werr.Error()
				return
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			cutIfRevoked(r)
			if frame.Len() > 0 && errors.Is(emit(), errSSEKeys) {
				end("sse_keys", keysMsg)
				return
			}
			drain()
			return
		default:
			rec(r).Detail = "reading upstream stream: " + err.Error()
			noteRevoked(r)
			if frame.Len() > 0 {
				emit()
			}
			drain()
			panic(http.ErrAbortHandler)
		}
	}
}
