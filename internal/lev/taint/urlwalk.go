package taint

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of the walk through a call's arguments in search of URLs. Arguments nested
// deeper, or holding more values, are not read whole, and the target is then unclear (a
// URL could hide past the bound). strictjson refuses nesting past 200 levels anyway; a
// server's ordinary arguments stay far below both.
const (
	maxURLWalkDepth  = 64
	maxURLWalkValues = 1 << 16
)

// Bounds of what an unclear target says: a value's place ("request.url") is cut at
// maxNameBytes, a reason names at most maxShownURLs places and counts the rest, and the
// raw text is cut at maxTargetBytes (rawText). A call carrying thousands of URLs under a
// long name would otherwise repeat the name for each.
const (
	maxNameBytes   = 256
	maxShownURLs   = 4
	maxTargetBytes = 4096
)

// foundURL is a string in a call's arguments that a client would take for a URL (or, for
// splitURL, text): where it is (name: "endpoint", "request.url", "urls[1]", cut at
// maxNameBytes; for an object key, the object holding it, "" for an argument's own name),
// and its text as given.
type foundURL struct {
	name, raw string
	key       bool
}

// what names the URL's place for a reason: "its endpoint argument".
func (u foundURL) what() string {
	switch {
	case !u.key:
		return "its " + u.name + " argument"
	case u.name == "":
		return "an argument's name"
	}
	return "a key of its " + u.name + " argument"
}

// labels names the places of the first URLs found, for a reason: "a, b, c, d, and 6 more".
func (w *urlWalk) labels() string {
	names := make([]string, 0, len(w.first))
	for _, u := range w.first {
		names = append(names, string(appendLabel(nil, u.name, u.key)))
	}
	return listed(names, w.n)
}

// listed is the first maxShownURLs of names, of n in all, for a reason.
func listed(names []string, n int) string {
	if len(names) > maxShownURLs {
		names = names[:maxShownURLs]
	}
	s := strings.Join(names, ", ")
	if n > len(names) {
		s += fmt.Sprintf(", and %d more", n-len(names))
	}
	return s
}

// appendLabel appends a place as the raw text of an unclear target names it: "endpoint",
// "hooks(key)", "(name)".
func appendLabel(b []byte, name string, key bool) []byte {
	switch {
	case !key:
		return append(b, name...)
	case name == "":
		return append(b, "(name)"...)
	}
	return append(append(b, name...), "(key)"...)
}

// urls walks args for every URL-shaped string (urlShaped), values and object keys alike,
// in key order, and counts those skip does not pass over (nil: none): the first
// maxShownURLs are kept, named, and each goes into the raw text as label=url. short is
// set, saying why, when the walk stopped at one of its bounds. It runs for every call of a
// tool lev does not know, a file's whole content among its values, so it copies nothing
// but the few it names and the capped text.
func (w *urlWalk) urls(args map[string]any, skip func(top, raw string) bool) {
	w.visit(args, func(w *urlWalk, top, s string, key bool) {
		if urlShaped(s) && (skip == nil || skip(top, s)) {
			w.count(s)
		}
	})
}

// count adds the string at hand, s (an object's key when w.atKey), to what the walk found.
func (w *urlWalk) count(s string) {
	key := w.atKey
	w.n++
	w.nameBuf = w.appendName(w.nameBuf[:0], key)
	if len(w.first) < maxShownURLs {
		w.first = append(w.first, foundURL{name: string(w.nameBuf), raw: s, key: key})
	}
	label := w.nameBuf // the name as the raw text labels it (appendLabel)
	switch {
	case key && len(label) == 0:
		label = append(label, "(name)"...)
	case key:
		label = append(label, "(key)"...)
	}
	w.nameBuf = label
	w.text.fieldBytes(label, s)
}

// pathStep is one step from an argument to a nested value: an object key or an array index.
type pathStep struct {
	key   string
	index int
	array bool
}

// urlWalk is the state of a walk through a call's arguments: the path to the value at hand
// (named only for a value counted), the values seen against the bound, and what it found:
// how many, the first few, the raw text naming them all.
type urlWalk struct {
	path  []pathStep
	seen  int
	short string
	atKey bool // the string at hand is an object's key (the path's last step)

	n     int
	first []foundURL
	text  rawText
	// bareAt names a URL to the target's host that ends at its host (splitURL), if any.
	bareAt string

	nameBuf []byte
}

// appendName appends the path to the string at hand ("request.url", "urls[1]"; for a key,
// the object's), cut at maxNameBytes and marked so with "…". It copies no more than that
// of a long key.
func (w *urlWalk) appendName(b []byte, key bool) []byte {
	start := len(b)
	steps := w.path
	if key {
		steps = steps[:len(steps)-1]
	}
	for i, st := range steps {
		switch {
		case st.array:
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(st.index), 10)
			b = append(b, ']')
		case i > 0:
			b = append(b, '.')
			fallthrough
		default:
			room := max(maxNameBytes-(len(b)-start), 0)
			b = append(b, st.key[:min(len(st.key), room+1)]...) // a byte past the room shows the cut
		}
		if len(b)-start > maxNameBytes {
			return append(wholeRunes(b[:start+maxNameBytes]), "…"...)
		}
	}
	return b
}

// here is the place of the string at hand, named.
func (w *urlWalk) here() foundURL {
	return foundURL{name: string(w.appendName(nil, w.atKey)), key: w.atKey}
}

// wholeRunes is b without a UTF-8 sequence cut short at its end.
func wholeRunes(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// visit calls f for every string in args, object keys and values alike, walking nested
// objects and arrays in key order; for a key, with w.atKey set and the key as the last
// path step. It stops, setting w.short, at the walk's bounds.
func (w *urlWalk) visit(args map[string]any, f func(w *urlWalk, top, s string, key bool)) {
	w.path = w.path[:0]
	for _, k := range sortedKeys(args) {
		w.path = append(w.path[:0], pathStep{key: k})
		w.atKey = true
		f(w, k, k, true)
		w.atKey = false
		if !w.walk(args[k], k, 1, f) {
			return
		}
	}
}

func (w *urlWalk) walk(v any, top string, depth int, f func(w *urlWalk, top, s string, key bool)) bool {
	w.seen++
	if w.seen > maxURLWalkValues {
		w.short = fmt.Sprintf("hold more than %d values", maxURLWalkValues)
		return false
	}
	if depth > maxURLWalkDepth {
		w.short = fmt.Sprintf("nest deeper than %d levels", maxURLWalkDepth)
		return false
	}
	switch v := v.(type) {
	case string:
		f(w, top, v, false)
	case map[string]any:
		for _, k := range sortedKeys(v) {
			// A server may take an object's keys for destinations too (a map of URLs to
			// what to send each).
			w.path = append(w.path, pathStep{key: k})
			w.atKey = true
			f(w, top, k, true)
			w.atKey = false
			ok := w.walk(v[k], top, depth+1, f)
			w.path = w.path[:len(w.path)-1]
			if !ok {
				return false
			}
		}
	case []any:
		for i, e := range v {
			w.path = append(w.path, pathStep{index: i, array: true})
			ok := w.walk(e, top, depth+1, f)
			w.path = w.path[:len(w.path)-1]
			if !ok {
				return false
			}
		}
	}
	return true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// rawText builds the raw text of an unclear target ("path=/tmp/x endpoint=https://…"),
// which is also the key of a session answer. It keeps the first maxTargetBytes; past them
// it hashes the whole, and the text ends in its length and hash: a cut text is longer than
// any whole one, and two calls whose texts differ anywhere keep different keys.
type rawText struct {
	b   []byte
	n   int
	h   hash.Hash
	buf []byte
}

// field adds "label=value", after a space unless it is the first.
func (t *rawText) field(label, value string) {
	if t.n > 0 {
		t.add(" ")
	}
	t.add(label)
	t.add("=")
	t.add(value)
}

func (t *rawText) fieldBytes(label []byte, value string) {
	if t.n > 0 {
		t.add(" ")
	}
	t.addBytes(label)
	t.add("=")
	t.add(value)
}

// addBytes is add for a place's name, which is cut at 256 bytes: the copy is small.
func (t *rawText) addBytes(p []byte) { t.add(string(p)) }

func (t *rawText) add(s string) {
	t.n += len(s)
	if t.h == nil && len(t.b)+len(s) <= maxTargetBytes {
		t.b = append(t.b, s...)
		return
	}
	t.spill()
	t.b = append(t.b, s[:min(len(s), maxTargetBytes-len(t.b))]...)
	for len(s) > 0 { // hashed through a buffer: a long value is not copied whole
		c := copy(t.buf, s)
		t.h.Write(t.buf[:c])
		s = s[c:]
	}
}

// spill starts the hash, of the text kept so far, the first time the text outgrows its cap.
func (t *rawText) spill() {
	if t.h == nil {
		t.h = sha256.New()
		t.h.Write(t.b)
		t.buf = make([]byte, 512)
	}
}

func (t *rawText) String() string {
	if t.h == nil {
		return string(t.b)
	}
	return fmt.Sprintf("%s… (%d bytes in all, sha256 %x)", wholeRunes(t.b), t.n, t.h.Sum(nil)[:16])
}

// capRaw is s as the raw text of an unclear target: whole up to maxTargetBytes, else cut
// as rawText cuts it.
func capRaw(s string) string {
	if len(s) <= maxTargetBytes {
		return s
	}
	var t rawText
	t.add(s)
	return t.String()
}
