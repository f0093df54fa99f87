// Package tomlx decodes lev's TOML files strictly: an unknown key or a value of the wrong
// type is an error naming the file, the key and its line, and validation errors raised
// after decoding can name the line of the key they are about.
//
// It owns strict decoding and line lookup. It must not judge what a value means: each
// file's own package validates its keys.
package tomlx

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Doc is a decoded document's key index: dotted key path to the 1-based line that sets it
// (or opens it, for a table). Order lists the paths in document order.
type Doc struct {
	File  string
	Lines map[string]int
	Order []string
	parts map[string][]string // dotted path -> its key parts (a quoted key may hold a dot)
}

// Decode reads data into v, refusing unknown keys and mistyped values, and returns the key
// index for later validation messages.
func Decode(file string, data []byte, v any) (*Doc, error) {
	doc, err := index(file, data)
	if err != nil {
		return nil, err
	}
	// go-toml matches keys to fields case-insensitively ([Tool_Permissions] would fill
	// tool_permissions, and two spellings of one table would merge): keys must be spelled
	// exactly as documented, like every other strict key.
	if err := doc.exactKeys(reflect.TypeOf(v)); err != nil {
		return nil, err
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			var msgs []string
			for i := range sm.Errors {
				e := &sm.Errors[i]
				row, _ := e.Position()
				msgs = append(msgs, fmt.Sprintf("%s:%d: unknown key %q", file, row, doc.fullKey(strings.Join(e.Key(), "."), row)))
			}
			return nil, errors.New(strings.Join(msgs, "; "))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			key := strings.Join(de.Key(), ".")
			if key == "" {
				return nil, fmt.Errorf("%s:%d: %s", file, row, de.Error())
			}
			return nil, fmt.Errorf("%s:%d: key %q: %s", file, row, key, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return doc, nil
}

// Errorf formats a validation error for key, prefixed with file:line when the key (or the
// nearest enclosing table) is in the document.
func (d *Doc) Errorf(key string, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if d == nil {
		return fmt.Errorf("key %q: %s", key, msg)
	}
	for k := key; k != ""; {
		if line, ok := d.Lines[k]; ok {
			return fmt.Errorf("%s:%d: key %q: %s", d.File, line, key, msg)
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return fmt.Errorf("%s: key %q: %s", d.File, key, msg)
}

// fullKey completes a key the decoder reports relative to an inline table, using the
// index: the longest indexed path on that line that ends with it.
func (d *Doc) fullKey(key string, row int) string {
	best := key
	for _, k := range d.Order {
		if d.Lines[k] == row && strings.HasSuffix(k, "."+key) && len(k) > len(best) {
			best = k
		}
	}
	return best
}

// Line returns the line of key, 0 when absent.
func (d *Doc) Line(key string) int {
	if d == nil {
		return 0
	}
	return d.Lines[key]
}

func index(file string, data []byte) (*Doc, error) {
	doc := &Doc{File: file, Lines: map[string]int{}, parts: map[string][]string{}}
	p := &unstable.Parser{}
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		n := p.Expression()
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = keyParts(n.Key())
			doc.add(table, line(p, n.Key()))
		case unstable.KeyValue:
			k := keyParts(n.Key())
			full := append(append([]string{}, table...), k...)
			doc.add(full, line(p, n.Key()))
			if v := n.Value(); v.Kind == unstable.InlineTable {
				doc.inline(p, full, v)
			}
		}
	}
	if err := p.Error(); err != nil {
		var pe *unstable.ParserError
		if errors.As(err, &pe) && len(pe.Highlight) > 0 {
			sh := p.Shape(p.Range(pe.Highlight))
			return nil, fmt.Errorf("%s:%d: %s", file, sh.Start.Line, pe.Message)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return doc, nil
}

func (d *Doc) inline(p *unstable.Parser, prefix []string, n *unstable.Node) {
	it := n.Children()
	for it.Next() {
		kv := it.Node()
		if kv.Kind != unstable.KeyValue {
			continue
		}
		full := append(append([]string{}, prefix...), keyParts(kv.Key())...)
		d.add(full, line(p, kv.Key()))
		if v := kv.Value(); v.Kind == unstable.InlineTable {
			d.inline(p, full, v)
		}
	}
}

func (d *Doc) add(parts []string, line int) {
	key := strings.Join(parts, ".")
	if _, ok := d.Lines[key]; !ok {
		d.Order = append(d.Order, key)
		d.Lines[key] = line
		d.parts[key] = parts
	}
}

// ExactKeys is Decode's case check alone, for a caller with its own decoder (the policy
// file): a key that names a field of v only case-insensitively is an error with its line.
func ExactKeys(file string, data []byte, v any) error {
	doc, err := index(file, data)
	if err != nil {
		return nil // a syntax error: the caller's decoder reports it in its own words
	}
	return doc.exactKeys(reflect.TypeOf(v))
}

// exactKeys refuses a key that names a struct field only case-insensitively.
func (d *Doc) exactKeys(t reflect.Type) error {
	for _, key := range d.Order {
		ft := t
	walk:
		for _, part := range d.parts[key] {
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array {
				ft = ft.Elem() // array tables: the path has no index
			}
			switch ft.Kind() {
			case reflect.Map:
				ft = ft.Elem()
			case reflect.Struct:
				next, exact, near := field(ft, part)
				if !exact {
					if near != "" {
						return fmt.Errorf("%s:%d: unknown key %q (keys are case-sensitive: the key is %q)", d.File, d.Lines[key], key, near)
					}
					break walk // unknown: the decoder names it
				}
				ft = next
			default:
				break walk
			}
		}
	}
	return nil
}

// field finds a struct field by its exact toml name; near is a name that matches only
// case-insensitively.
func field(t reflect.Type, name string) (ft reflect.Type, exact bool, near string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		n, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if n == "-" {
			continue
		}
		if n == "" {
			n = f.Name
		}
		if n == name {
			return f.Type, true, ""
		}
		if strings.EqualFold(n, name) {
			near = n
		}
	}
	return nil, false, near
}

func keyParts(it unstable.Iterator) []string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

func line(p *unstable.Parser, it unstable.Iterator) int {
	if !it.Next() {
		return 0
	}
	r := it.Node().Raw
	if r.Length == 0 && r.Offset == 0 {
		return 0
	}
	return p.Shape(r).Start.Line
}
