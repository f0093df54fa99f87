package brokerctl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Request headers never forwarded upstream. Client-sent credentials are dropped so the
// only credential upstream sees is the host's key; hop-by-hop headers are per connection.
var dropRequest = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "X-Api-Key": true, "Api-Key": true,
	"Cookie": true, "Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Host": true,
	// The transport asks for gzip itself and decompresses, so the redactor always sees
	// plain text and the body cap counts decoded bytes, as lev's does.
	"Accept-Encoding": true,
	"Forwarded":       true, "X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true,
}

var dropResponse = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Set-Cookie": true,
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// handleLLM proxies /llm/<rest> to <llm_upstream>/<rest>, adding the API key on the way
// out. Memory per request is bounded: plain bodies stream through a 32 KiB buffer, SSE
// streams hold at most one frame (capped at MaxFrame).
func (s *Server) handleLLM(w http.ResponseWriter, r *http.Request) {
	if s.upstream == nil {
		jsonError(w, r, http.StatusNotFound, "not_found", "the /llm/ route is off: no llm_upstream with an api_key_file (llm_auth is not api-key)")
		return
	}
	if r.ContentLength > s.opts.MaxBody {
		jsonError(w, r, http.StatusRequestEntityTooLarge, "body_cap", fmt.Sprintf("request body of %d bytes exceeds the %s body cap", r.ContentLength, sizeText(s.opts.MaxBody)))
		return
	}
	target := *s.upstream
	target.Path = strings.TrimSuffix(target.Path, "/") + strings.TrimPrefix(r.URL.Path, "/llm")
	target.RawPath = ""
	target.RawQuery = r.URL.RawQuery
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBody)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target.String(), body)
	if err != nil {
		jsonError(w, r, http.StatusBadRequest, "bad_request", "building upstream request: "+err.Error())
		return
	}
	out.ContentLength = r.ContentLength
	if r.ContentLength == 0 {
		out.Body = http.NoBody
	}
	for k, vs := range r.Header {
		if dropRequest[k] || connectionListed(r.Header, k) {
			continue
		}
		out.Header[k] = vs
	}
	switch s.opts.AuthHeader {
	case AuthXAPIKey:
		out.Header.Set("X-Api-Key", string(s.apiKey))
	default:
		out.Header.Set("Authorization", "Bearer "+string(s.apiKey))
	}
	resp, err := s.client.Do(out)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			jsonError(w, r, http.StatusRequestEntityTooLarge, "body_cap", fmt.Sprintf("request body exceeds the %s body cap", sizeText(s.opts.MaxBody)))
			return
		}
		// The error names the URL, never a header: the key cannot be in it.
		jsonError(w, r, http.StatusBadGateway, "upstream", "upstream request failed: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.ContentLength > s.opts.MaxBody {
		jsonError(w, r, http.StatusBadGateway, "body_cap", fmt.Sprintf("upstream response body of %d bytes exceeds the %s body cap", resp.ContentLength, sizeText(s.opts.MaxBody)))
		return
	}
	for k, vs := range resp.Header {
		if dropResponse[k] || connectionListed(resp.Header, k) {
			continue
		}
		masked := make([]string, len(vs))
		for i, v := range vs {
			masked[i] = strings.ReplaceAll(v, string(s.apiKey), strings.Repeat("*", len(s.apiKey)))
		}
		w.Header()[k] = masked
	}
	rec(r).Detail = "upstream " + strconv.Itoa(resp.StatusCode)
	if isEventStream(resp.Header.Get("Content-Type")) {
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		s.streamSSE(w, r, resp.Body)
		return
	}
	w.WriteHeader(resp.StatusCode)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	rw := &redactWriter{w: w, secret: s.apiKey}
	n, err := io.CopyBuffer(rw, io.LimitReader(resp.Body, s.opts.MaxBody+1), *bp)
	if n > s.opts.MaxBody {
		// The status line is gone; aborting the connection is the only honest signal, so
		// the client sees a broken body rather than a silently truncated one.
		rec(r).Detail = fmt.Sprintf("upstream response body exceeds the %s body cap; connection aborted", sizeText(s.opts.MaxBody))
		panic(http.ErrAbortHandler)
	}
	if err == nil {
		err = rw.Close()
	}
	if err != nil {
		rec(r).Detail = "copying upstream response: " + err.Error()
		panic(http.ErrAbortHandler)
	}
}

func isEventStream(ct string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
}

func connectionListed(h http.Header, key string) bool {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(f)) == key {
				return true
			}
		}
	}
	return false
}

// streamSSE forwards an event stream one complete frame (event) at a time, flushing after
// each unless the next one is already buffered, so the client sees tokens as they come. A
// frame larger than MaxFrame is never forwarded: the client gets an error event naming
// the cap and the stream ends.
func (s *Server) streamSSE(w http.ResponseWriter, r *http.Request, body io.Reader) {
	rc := http.NewResponseController(w)
	br := bufio.NewReaderSize(body, 32<<10)
	var frame bytes.Buffer
	lineStart := true
	emit := func() error {
		maskInPlace(frame.Bytes(), s.apiKey)
		if _, err := w.Write(frame.Bytes()); err != nil {
			return err
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
	for {
		line, err := br.ReadSlice('\n')
		blank := lineStart && (string(line) == "\n" || string(line) == "\r\n")
		frame.Write(line)
		lineStart = err == nil
		if int64(frame.Len()) > s.opts.MaxFrame {
			msg := fmt.Sprintf("upstream SSE frame exceeds the %s frame cap; stream ended", sizeText(s.opts.MaxFrame))
			rec(r).Detail = msg
			rec(r).Outcome = "frame_cap"
			fmt.Fprintf(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"frame_cap\",\"message\":\"lever broker: %s\"}}\n\n", msg)
			rc.Flush()
			return
		}
		if blank {
			if werr := emit(); werr != nil {
				rec(r).Detail = "writing to client: " + werr.Error()
				return
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if frame.Len() > 0 {
				emit()
			}
			return
		default:
			rec(r).Detail = "reading upstream stream: " + err.Error()
			if frame.Len() > 0 {
				emit()
			}
			panic(http.ErrAbortHandler)
		}
	}
}
