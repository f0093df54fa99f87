// Package capread reads remote peers through lev's fixed size caps. They are constants,
// not configuration: every well-formed reply is far below them, and a knob that only
// matters under attack would be a knob for the attacker.
//
// It owns those caps and the error a reply past one gets. It must not make them
// configurable, and nothing in lev may read a remote body except through it.
package capread

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

const (
	// BodyCap bounds one buffered response body, error pages included.
	BodyCap = 64 << 20
	// FrameCap bounds one streamed frame (an SSE event) or one partial line of a stream.
	FrameCap = 8 << 20
	// MCPLineCap bounds one line from an MCP stdio server.
	MCPLineCap = 1 << 20
)

// CapError is a read past a cap. Its message is the one docs/lev.md ("Providers and caps") shows: "response body exceeded 64 MiB
// from api.openai.com".
type CapError struct {
	What string // "response body", "stream frame", "line"
	Cap  int64
	Peer string
}

func (e *CapError) Error() string {
	return fmt.Sprintf("%s exceeded %s from %s", e.What, Size(e.Cap), e.Peer)
}

// IsCap reports whether err is a cap error.
func IsCap(err error) bool {
	var ce *CapError
	return errors.As(err, &ce)
}

// Size renders a cap: 64 MiB, 8 MiB, 1 MiB.
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// chunk is the unit the body is gathered in: a failed read never holds more than the cap,
// and a growing slice never doubles past it.
const chunk = 1 << 20

// ReadAll reads r to its end, failing with a CapError once more than limit bytes arrive.
// A declared length (-1 when unknown) over the limit fails before anything is read; a
// declared length is never trusted for the allocation beyond the limit.
func ReadAll(r io.Reader, declared, limit int64, what, peer string) ([]byte, error) {
	if declared > limit {
		return nil, &CapError{What: what, Cap: limit, Peer: peer}
	}
	var parts [][]byte
	total := int64(0)
	for {
		want := int64(chunk)
		if rest := limit + 1 - total; rest < want {
			want = rest
		}
		buf := make([]byte, want)
		n, err := io.ReadFull(r, buf)
		total += int64(n)
		if n > 0 {
			parts = append(parts, buf[:n])
		}
		if total > limit {
			return nil, &CapError{What: what, Cap: limit, Peer: peer}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return bytes.Join(parts, nil), nil
}

// Peer names the remote end of a response for cap messages: its host name.
func Peer(resp *http.Response) string {
	if resp != nil && resp.Request != nil && resp.Request.URL != nil {
		return resp.Request.URL.Hostname()
	}
	return "the peer"
}

// Body reads a response body under BodyCap. On a cap error the body is closed unread, which
// drops the connection (the transport cannot reuse a half-read one), so the rest is never
// read.
func Body(resp *http.Response) ([]byte, error) {
	b, err := ReadAll(resp.Body, resp.ContentLength, BodyCap, "response body", Peer(resp))
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	return b, resp.Body.Close()
}

// LineReader reads lines of at most Limit bytes. Unlike bufio.Scanner it holds at most the
// limit, whatever the peer sends, and says which cap it hit.
type LineReader struct {
	r     *bufio.Reader
	Limit int
	What  string
	Peer  string
	buf   []byte
}

// NewLineReader wraps r.
func NewLineReader(r io.Reader, limit int, what, peer string) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), Limit: limit, What: what, Peer: peer}
}

// Line returns the next line without its "\n" (and "\r"). The slice is valid until the
// next call. io.EOF at the end; a trailing unterminated line is returned first.
func (l *LineReader) Line() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		if len(l.buf)+len(frag) > l.Limit+2 { // +2: "\r\n" is not content
			return nil, &CapError{What: l.What, Cap: int64(l.Limit), Peer: l.Peer}
		}
		l.buf = appendCapped(l.buf, frag, l.Limit+2)
		switch {
		case err == nil:
			line := bytes.TrimSuffix(l.buf[:len(l.buf)-1], []byte("\r"))
			if len(line) > l.Limit {
				return nil, &CapError{What: l.What, Cap: int64(l.Limit), Peer: l.Peer}
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(l.buf) > 0:
			return bytes.TrimSuffix(l.buf, []byte("\r")), nil
		default:
			return nil, err
		}
	}
}

// MCPLines reads an MCP stdio server's output under MCPLineCap: "line exceeded 1 MiB from
// the MCP server".
func MCPLines(r io.Reader) *LineReader {
	return NewLineReader(r, MCPLineCap, "line", "the MCP server")
}

// SSE reads server-sent events with each event (all its data lines together) and each
// partial line bounded by FrameCap.
type SSE struct {
	lines *LineReader
	peer  string
}

// Event is one server-sent event.
type Event struct {
	Name string
	Data []byte
}

// NewSSE wraps a streaming response body.
func NewSSE(r io.Reader, peer string) *SSE {
	return &SSE{lines: NewLineReader(r, FrameCap, "stream frame", peer), peer: peer}
}

// Next returns the next event with data, or io.EOF.
func (s *SSE) Next() (Event, error) {
	var ev Event
	var data []byte
	have := false
	for {
		line, err := s.lines.Line()
		if err != nil {
			if errors.Is(err, io.EOF) && have {
				ev.Data = data
				return ev, nil
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if have {
				ev.Data = data
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.Name = string(value)
		case "data":
			if len(data)+len(value)+1 > FrameCap {
				return Event{}, &CapError{What: "stream frame", Cap: FrameCap, Peer: s.peer}
			}
			if have {
				data = appendCapped(data, []byte{'\n'}, FrameCap)
			}
			data = appendCapped(data, value, FrameCap)
			have = true
		}
	}
}

// appendCapped appends like append, but never grows the capacity past limit, so a buffer
// that fills up to a cap costs about the cap, not twice it.
func appendCapped(dst, src []byte, limit int) []byte {
	need := len(dst) + len(src)
	if need <= cap(dst) {
		return append(dst, src...)
	}
	c := max(2*cap(dst), need, 4096)
	if c > limit && need <= limit {
		c = limit
	}
	n := make([]byte, len(dst), c)
	copy(n, dst)
	return append(n, src...)
}
