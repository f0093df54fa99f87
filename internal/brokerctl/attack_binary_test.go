package brokerctl

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// utf encodes s in UTF-16 or UTF-32 (width 2 or 4), little- or big-endian.
func utf(s string, width int, big bool) []byte {
	var out []byte
	for i := 0; i < len(s); i++ {
		pad := make([]byte, width-1)
		if big {
			out = append(append(out, pad...), s[i])
		} else {
			out = append(append(out, s[i]), pad...)
		}
	}
	return out
}

// binaryCase is one upstream answer: its bytes, how the upstream labels them, and where
// the key sits in it (start and end; start < 0: nowhere, the body must come back byte for
// byte).
type binaryCase struct {
	name       string
	ct         string
	body       []byte
	start, end int
	split      int // > 0: the upstream sends body[:split] and waits before the rest
}

// randomBinary is a body of random bytes in the shapes binary formats take: runs of zero
// bytes (padding, trailing zeros), long stretches without a line break, and endings that
// hold less of the key than the masker acts on in any form (two characters, the zero
// padding of the UTF-16/32 forms, an escape cut off).
func randomBinary(rng *rand.Rand) []byte {
	b := make([]byte, rng.Intn(48<<10))
	rng.Read(b)
	for range rng.Intn(6) {
		at, n := rng.Intn(len(b)+1), rng.Intn(64)
		b = append(b[:at], append(make([]byte, n), b[at:]...)...)
	}
	if rng.Intn(3) == 0 { // a long line no SSE parser reads, after a zero run
		at := rng.Intn(len(b) + 1)
		long := append([]byte("\x00\x00\x00\n"), bytes.Repeat([]byte{0xff}, plainLine+rng.Intn(plainLine))...)
		b = append(b[:at], append(long, b[at:]...)...)
	}
	tails := [][]byte{
		{}, {0}, {0, 0}, {0, 0, 0}, {0, 0, 0, 0}, make([]byte, 3+rng.Intn(40)),
		[]byte(testKey[:2]), []byte(testKey[:2] + "\x00\x00\x00"), []byte(testKey[:2] + `\`), []byte(testKey[:2] + "%"),
		[]byte(testKey[:2] + "&#"), []byte(testKey[:2] + `\u00`),
		utf(testKey[:2], 2, false), utf(testKey[:2], 2, true)[:4], utf(testKey[:2], 4, true), utf(testKey[:2], 4, false),
		append(utf(testKey[:2], 4, true), 0, 0, 0),
		// the start of the hex form: two bytes of the key ("736b"), a number ending in
		// "736" (a byte and a half)
		[]byte(fmt.Sprintf("%x", testKey[:2])), []byte("total 1736"),
	}
	return append(b, tails[rng.Intn(len(tails))]...)
}

// TestBinaryBodiesPassByteForByte (issue 27 item 15): an upstream answer that is not text
// (audio, an image, a file) came back altered: three trailing zero bytes became "***",
// because they begin the big-endian UTF-32 form of every key and the masker masked a
// cut-off occurrence at the end of the stream by its bytes, not by how much of the key
// they hold (so did "736", the start of the key's hex form, a byte and a half of it). Bytes that are not a match must never change: hundreds of random binary
// bodies, with zero runs, long lines and endings that hold less of the key than the
// masker acts on in any form, labelled as octet-stream, audio, JSON (a body that starts
// with '{' is joined as JSON), SSE or nothing, each sent by the upstream in random pieces,
// come back through the broker byte for byte. Controls, in the same bodies: the key whole
// (raw, UTF-16, UTF-32, hex; and split between two upstream writes with a pause between,
// in a binary body and in an event stream) and a cut-off occurrence
// holding enough of it (raw and big-endian UTF-32, the form whose padding caused the bug)
// are masked, and only their bytes change.
func TestBinaryBodiesPassByteForByte(t *testing.T) {
	rng := rand.New(rand.NewSource(27))
	cts := []string{"application/octet-stream", "audio/mpeg", "image/png", "", "application/json", "text/event-stream"}
	var cases []binaryCase
	for i := range 240 {
		b := randomBinary(rng)
		if i%7 == 0 { // begins as JSON, so the joined-JSON pass reads it
			b = append([]byte("{\"a\":\""), b...)
		}
		cases = append(cases, binaryCase{fmt.Sprintf("random %d", i), cts[i%len(cts)], b, -1, -1, 0})
	}
	// The zero-byte endings the suite found, alone.
	for n := 1; n <= 8; n++ {
		cases = append(cases, binaryCase{fmt.Sprintf("%d trailing zeros", n), "application/octet-stream", append([]byte("RIFF\x10\x00"), make([]byte, n)...), -1, -1, 0})
	}
	embed := func(name string, key []byte, atEnd bool) {
		b := randomBinary(rng)
		at := rng.Intn(len(b) + 1)
		if atEnd {
			at = len(b)
		}
		body := append(append(append([]byte(nil), b[:at]...), key...), b[at:]...)
		if atEnd {
			body = body[:at+len(key)]
		}
		cases = append(cases, binaryCase{name, "application/octet-stream", body, at, at + len(key), 0})
	}
	for i := range 4 {
		embed(fmt.Sprintf("control: raw key %d", i), []byte(testKey), false)
		embed(fmt.Sprintf("control: UTF-16LE key %d", i), utf(testKey, 2, false), false)
		embed(fmt.Sprintf("control: UTF-32BE key %d", i), utf(testKey, 4, true), false)
		embed(fmt.Sprintf("control: hex key %d", i), []byte(fmt.Sprintf("%x", testKey)), false)
	}
	// The key split between two upstream writes, with a pause between (so between two
	// reads of the broker), in a binary body and in one labelled as an event stream.
	for i, form := range [][]byte{[]byte(testKey), utf(testKey, 4, true), utf(testKey, 2, false)} {
		for _, ct := range []string{"application/octet-stream", "text/event-stream"} {
			embed(fmt.Sprintf("control: key split over two writes, form %d, %s", i, ct), form, false)
			c := &cases[len(cases)-1]
			c.ct, c.split = ct, c.start+len(form)/2+1
		}
	}
	embed("control: key cut off at the end", []byte(testKey[:12]), true)
	embed("control: UTF-32BE key cut off at the end, three characters", utf(testKey[:3], 4, true), true)
	embed("control: hex key cut off at the end, three bytes", []byte(fmt.Sprintf("%x", testKey[:3])), true)

	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err != nil || i < 0 || i >= len(cases) {
			http.Error(w, "no such case", 404)
			return
		}
		c := cases[i]
		if c.ct != "" {
			w.Header().Set("Content-Type", c.ct)
		} else {
			w.Header()["Content-Type"] = nil // no sniffing: no label at all
		}
		// In random pieces, each flushed, so the broker reads the body (and a key in it)
		// split at random points.
		prng := rand.New(rand.NewSource(int64(i)))
		b := c.body
		if c.split > 0 {
			w.Write(b[:c.split])
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
			b = b[c.split:]
		}
		for len(b) > 0 {
			n := min(len(b), 1+prng.Intn(8<<10))
			w.Write(b[:n])
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	}), func(o *Options) { o.LLMRoutes = []string{"GET /bin"} })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	for i, tc := range cases {
		resp, err := c.Get(fmt.Sprintf("%s/llm/bin?i=%d", h.url, i))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", tc.name, resp.StatusCode, err)
		}
		if tc.start < 0 {
			if !bytes.Equal(got, tc.body) {
				d := 0
				for d < min(len(got), len(tc.body)) && got[d] == tc.body[d] {
					d++
				}
				t.Errorf("%s (%q): %d bytes back of %d, first difference at %d: %q became %q", tc.name, tc.ct, len(got), len(tc.body), d,
					tc.body[d:min(d+16, len(tc.body))], got[d:min(d+16, len(got))])
			}
			continue
		}
		// Control: the key's bytes are all masked, and nothing else changed.
		if len(got) != len(tc.body) || !bytes.Equal(got[:tc.start], tc.body[:tc.start]) || !bytes.Equal(got[tc.end:], tc.body[tc.end:]) {
			t.Errorf("%s: bytes outside the key changed (%d back of %d)", tc.name, len(got), len(tc.body))
			continue
		}
		for k := tc.start; k < tc.end; k++ {
			if got[k] != '*' && tc.body[k] != 0 {
				t.Errorf("%s: key byte %d came back as %q", tc.name, k-tc.start, got[k])
				break
			}
		}
	}
}
