package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// maxFileSize bounds what the loader will parse: a lever.yaml is a few hundred bytes, and
// a bound keeps a hostile or mistaken file (a disk image named lever.yaml) from costing
// memory.
const maxFileSize = 1 << 20

// keyLines records the line of every key the file set, by dotted path, so that checks run
// after decoding (validate) can still point at the line that is wrong.
type keyLines map[string]int

// decoder walks a yaml.v3 node tree against the Config struct. It is written by hand,
// rather than using yaml.v3's KnownFields, because KnownFields stops at the first unknown
// key and its type errors do not name the key; lever wants every problem, each with its
// dotted key and line.
type decoder struct {
	file    string
	maxLine int // the input's last line; yaml.v3 can place an empty document's node past it
	lines   keyLines
	probs   Problems
}

func (d *decoder) add(line int, key, format string, args ...any) {
	if line < 1 {
		line = 1
	}
	if d.maxLine > 0 && line > d.maxLine {
		line = d.maxLine
	}
	d.probs = append(d.probs, &Problem{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// decode parses data into c. It returns the line of every key set, and all structural
// problems (syntax, unknown keys, wrong types).
func decode(file string, data []byte, c *Config) (keyLines, Problems) {
	d := &decoder{file: file, lines: keyLines{}, maxLine: countLines(data)}
	if len(data) > maxFileSize {
		d.add(1, "", "file is %d bytes; a lever.yaml may be at most %d", len(data), maxFileSize)
		return d.lines, d.probs
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.add(1, "", "file is empty; expected a mapping of lever settings (name, backend, tree, ...)")
			return d.lines, d.probs
		}
		d.add(syntaxErrorLine(err, data), "", "invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return d.lines, d.probs
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.add(extra.Line, "", "only one YAML document is allowed; a second one starts here")
		return d.lines, d.probs
	} else if !errors.Is(err, io.EOF) {
		d.add(syntaxErrorLine(err, data), "", "invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return d.lines, d.probs
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			d.add(1, "", "file is empty; expected a mapping of lever settings (name, backend, tree, ...)")
			return d.lines, d.probs
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		d.add(root.Line, "", "file is empty; expected a mapping of lever settings (name, backend, tree, ...)")
		return d.lines, d.probs
	}
	if root.Kind != yaml.MappingNode {
		d.add(root.Line, "", "expected a mapping of lever settings at the top level, got %s", describe(root))
		return d.lines, d.probs
	}
	d.value(root, "", reflect.ValueOf(c).Elem())
	return d.lines, d.probs
}

// syntaxErrorLine finds the line of a yaml.v3 syntax error. Most errors carry "line N";
// the scanner's encoding errors do not, so the first byte that makes the file invalid
// (bad UTF-8 or a control character) is located instead.
func syntaxErrorLine(err error, data []byte) int {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil && n > 0 {
			return n
		}
	}
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return line
		}
		switch {
		case r == '\r' && i+1 < len(data) && data[i+1] == '\n':
			// CRLF is one break; the '\n' counts it.
		case isBreak(r):
			line++
		case r < 0x20 && r != '\t' || r == 0x7f:
			return line
		}
		i += size
	}
	return line
}

// countLines counts lines as YAML does (CRLF is one break).
func countLines(data []byte) int {
	n := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if isBreak(r) && !(r == '\r' && i+1 < len(data) && data[i+1] == '\n') {
			n++
		}
		i += size
	}
	return n
}

// isBreak is YAML's idea of a line break (yaml.v3 counts lines by these): LF, CR, NEL,
// LS and PS.
func isBreak(r rune) bool {
	return r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029
}

// describe names what a node holds, for "expected X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("the string %q", v)
		case "!!int":
			return "the integer " + v
		case "!!bool":
			return "the boolean " + v
		case "!!float":
			return "the number " + v
		case "!!null":
			return "an empty value"
		default:
			return fmt.Sprintf("a value tagged %s", n.ShortTag())
		}
	}
	return "an unknown node"
}

func expected(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int:
		return "an integer"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(expected(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// value decodes n into v, reporting against the dotted key path.
func (d *decoder) value(n *yaml.Node, path string, v reflect.Value) {
	if n.Anchor != "" || n.Kind == yaml.AliasNode {
		// Anchors and aliases would let one line stand for another, which defeats
		// "the error names the line"; lever.yaml is small enough not to need them.
		d.add(n.Line, path, "YAML anchors and aliases are not allowed in lever.yaml")
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // a key with no value is unset; defaults and required checks apply
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.add(n.Line, path, "expected %s, got %s", expected(v.Type()), describe(n))
			return
		}
		d.mapping(n, path, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.add(n.Line, path, "expected %s, got %s", expected(v.Type()), describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = item.Line
			d.value(item, p, s.Index(i))
		}
		v.Set(s)
	case reflect.String, reflect.Int, reflect.Bool:
		d.scalar(n, path, v)
	default:
		d.add(n.Line, path, "internal error: unsupported field type %s", v.Type())
	}
}

func (d *decoder) scalar(n *yaml.Node, path string, v reflect.Value) {
	want := map[reflect.Kind]string{reflect.String: "!!str", reflect.Int: "!!int", reflect.Bool: "!!bool"}[v.Kind()]
	if n.Kind != yaml.ScalarNode || n.ShortTag() != want {
		d.add(n.Line, path, "expected %s, got %s", expected(v.Type()), describe(n))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(n.Value)
	case reflect.Int:
		var i int64
		if err := n.Decode(&i); err != nil || int64(int(i)) != i {
			d.add(n.Line, path, "expected %s, got %s (out of range)", expected(v.Type()), describe(n))
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		var b bool
		if err := n.Decode(&b); err != nil {
			d.add(n.Line, path, "expected %s, got %s", expected(v.Type()), describe(n))
			return
		}
		v.SetBool(b)
	}
}

// fieldsOf maps each yaml key of a struct type to its field index.
func fieldsOf(t reflect.Type) (map[string]int, []string) {
	idx := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		idx[tag] = i
		names = append(names, tag)
	}
	sort.Strings(names)
	return idx, names
}

func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	idx, names := fieldsOf(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" || k.Anchor != "" {
			d.add(k.Line, path, "keys must be plain names, got %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.add(k.Line, p, "duplicate key (first set on line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		fi, ok := idx[k.Value]
		if !ok {
			where := "at the top level"
			if path != "" {
				where = "in " + path
			}
			d.add(k.Line, p, "unknown key (known keys %s: %s)", where, strings.Join(names, ", "))
			continue
		}
		d.lines[p] = k.Line
		d.value(val, p, v.Field(fi))
	}
}
