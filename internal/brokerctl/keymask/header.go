package keymask

import (
	"bytes"
	"maps"
	"net/http"
	"slices"
)

// hdrBlock is a header as the jail receives it: names sorted, as net/http writes them,
// each with its values, as bytes that masking overwrites in place.
type hdrBlock struct {
	names [][]byte
	vals  [][][]byte
}

// segRef is one name (v < 0) or value of a hdrBlock.
type segRef struct{ h, v int }

// hdrText is a run of names and values a client could read as one text.
type hdrText struct {
	refs []segRef
	b    []byte
}

// newHdrBlock copies h into one buffer (this runs for every response).
func newHdrBlock(h http.Header) *hdrBlock {
	keys := slices.Sorted(maps.Keys(h))
	size, nvals := 0, 0
	for _, k := range keys {
		size += len(k)
		for _, v := range h[k] {
			size += len(v)
		}
		nvals += len(h[k])
	}
	buf := make([]byte, 0, size)
	vals := make([][]byte, 0, nvals)
	b := &hdrBlock{names: make([][]byte, len(keys)), vals: make([][][]byte, len(keys))}
	// Each piece is cut with its capacity at its end, so no append can run into the next.
	piece := func(s string) []byte {
		buf = append(buf, s...)
		return buf[len(buf)-len(s) : len(buf) : len(buf)]
	}
	for i, k := range keys {
		b.names[i] = piece(k)
		from := len(vals)
		for _, v := range h[k] {
			vals = append(vals, piece(v))
		}
		b.vals[i] = vals[from:len(vals):len(vals)]
	}
	return b
}

func (b *hdrBlock) seg(r segRef) []byte {
	if r.v < 0 {
		return b.names[r.h]
	}
	return b.vals[r.h][r.v]
}

func (b *hdrBlock) text(refs []segRef) hdrText {
	n := 0
	for _, r := range refs {
		n += len(b.seg(r))
	}
	t := hdrText{refs: refs, b: make([]byte, 0, n)}
	for _, r := range refs {
		t.b = append(t.b, b.seg(r)...)
	}
	return t
}

// put copies the masked bytes of a text back into its segments, and reports whether
// that masked anything. Only '*' is copied, so texts that share a segment never undo
// each other's masking.
func (b *hdrBlock) put(refs []segRef, t []byte) bool {
	changed, off := false, 0
	for _, r := range refs {
		s := b.seg(r)
		for k := range s {
			if t[off+k] == '*' && s[k] != '*' {
				s[k], changed = '*', true
			}
		}
		off += len(s)
	}
	return changed
}

// writeTo replaces h's contents with the block's (a masked name may now equal another).
func (b *hdrBlock) writeTo(h http.Header) {
	clear(h)
	for i, n := range b.names {
		k := string(n)
		for _, v := range b.vals[i] {
			h[k] = append(h[k], string(v))
		}
	}
}

// runs are the orders in which a client could run the whole header together: as it is
// written (each name followed by its values), the values alone, the names alone.
func (b *hdrBlock) runs() []hdrText {
	nv := 0
	for _, vs := range b.vals {
		nv += len(vs)
	}
	wire := make([]segRef, 0, len(b.names)+nv)
	vals := make([]segRef, 0, nv)
	names := make([]segRef, 0, len(b.names))
	for i := range b.names {
		wire = append(wire, segRef{i, -1})
		names = append(names, segRef{i, -1})
		for j := range b.vals[i] {
			wire = append(wire, segRef{i, j})
			vals = append(vals, segRef{i, j})
		}
	}
	return []hdrText{b.text(wire), b.text(vals), b.text(names)}
}

// cutTexts returns the texts a client could put right before the body that end in a
// possible start of the key (Masker.cutAt), and whether one ends in MinHold characters or
// more of it. The candidates: the runs (as masked), and any one header line (its name
// and values), name or value, since which header comes last is up to the server
// (net/http appends Date and Content-Length after the sorted ones) and the client.
//
// This runs for every response, and many a header ends in one character that could
// start the key ("application/json": base64 of the key can start with n), so nothing is
// copied that need not be: a name or value is joined in place (its text is the block's
// own bytes, so masking it masks the header), and a run or line only when its partial
// starts before its last segment, since one inside that segment is the segment's own.
func (b *hdrBlock) cutTexts(m *Masker, runs []hdrText) (out []hdrText, hold bool) {
	consider := func(t hdrText, last int, keep func(hdrText) hdrText) {
		i := m.cutAt(t.b, 1, false)
		if i < 0 || (len(t.refs) > 1 && i >= len(t.b)-last) {
			return
		}
		out = append(out, keep(t))
		hold = hold || m.cutAt(t.b, MinHold, false) >= 0
	}
	as := func(t hdrText) hdrText { return t }
	inPlace := func(t hdrText) hdrText { return hdrText{b: t.b} }
	copied := func(t hdrText) hdrText { return hdrText{refs: slices.Clone(t.refs), b: bytes.Clone(t.b)} }
	for _, t := range runs {
		if len(t.refs) > 0 {
			consider(t, len(b.seg(t.refs[len(t.refs)-1])), as)
		}
	}
	var line hdrText
	for i := range b.names {
		consider(hdrText{b: b.names[i]}, 0, inPlace)
		line.b = append(line.b[:0], b.names[i]...)
		line.refs = append(line.refs[:0], segRef{i, -1})
		for j, v := range b.vals[i] {
			consider(hdrText{b: v}, 0, inPlace)
			line.b = append(line.b, v...)
			line.refs = append(line.refs, segRef{i, j})
		}
		consider(line, len(b.seg(line.refs[len(line.refs)-1])), copied)
	}
	return out, hold
}

// maskHeader masks the key in header names and values. Each of the runs (hdrBlock.runs)
// is masked as one text, so a key split across two values of one header or of two
// headers, between a name and its value, or across names is found as well as one inside
// a single value. Masking keeps lengths, so each run splits back. It returns the block
// and its runs, masked, for the join with the body.
func maskHeader(h http.Header, m *Masker) (*hdrBlock, []hdrText) {
	b := newHdrBlock(h)
	runs := b.runs()
	changed := false
	for _, t := range runs {
		if m.MaskInPlace(t.b) {
			changed = b.put(t.refs, t.b) || changed
		}
	}
	if changed {
		b.writeTo(h)
		runs = b.runs() // each shows what the others masked too
	}
	return b, runs
}

// Header is a response header as MaskHeader masked it, with the texts of it a client could
// read right before the body's first bytes.
type Header struct {
	block *hdrBlock
	joins []hdrText
}

// MaskHeader masks the key in h in place (maskHeader) and finds the texts of the header
// that end in a possible start of the key (cutTexts). hold: one ends in MinHold characters
// or more, so the header must wait for the body bytes that complete or break the match
// (Stream.Join, then Header.WriteTo once JoinLive is false or at the end).
func MaskHeader(h http.Header, m *Masker) (hdr *Header, hold bool) {
	block, runs := maskHeader(h, m)
	joins, hold := block.cutTexts(m, runs)
	return &Header{block: block, joins: joins}, hold
}

// Join joins hdr's texts onto the stream's first bytes: until the first byte is released,
// a match that begins in one and ends in the body masks both parts.
func (s *Stream) Join(hdr *Header) {
	for _, t := range hdr.joins {
		s.join = append(s.join, t.b)
	}
}

// WriteTo writes the held header into h, with what the body's first bytes showed to be
// part of the key masked (in the block's own bytes, or copied back from a run or line).
func (hdr *Header) WriteTo(h http.Header) {
	for _, t := range hdr.joins {
		hdr.block.put(t.refs, t.b)
	}
	hdr.block.writeTo(h)
}
