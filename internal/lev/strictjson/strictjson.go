// Package strictjson decodes a tool call's JSON arguments exactly once, strictly.
//
// encoding/json matches object keys to struct fields case-insensitively (with Unicode
// folding: "URL", "Url", "\u212arl"-style spellings all land in the `url` field) and lets a
// later duplicate key overwrite an earlier one. Anything else that reads the same raw bytes
// with exact keys (a gate, a record, a person approving the call) then sees a different
// value from the one the tool acts on. So before decoding, the token stream is checked
// against the target type: every object key must be spelled exactly as a field's json
// name, no key may repeat (exactly, or after Unicode case folding, which is what a
// case-insensitive reader would merge), and nothing may follow the value.
//
// It owns that one strict decode. It must not grow a lenient mode: a second reading of the
// same bytes is the bug it exists to prevent.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"
)

// Decode decodes raw into v (a pointer), refusing unknown keys, keys that differ from a
// field's name only in case, duplicate keys (exact or case-folded), values of the wrong
// type and trailing data. Errors name the offending key by its path (e.g. headers.Host).
// Empty input is the empty object.
func Decode(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("strictjson: Decode needs a non-nil pointer")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return syntaxErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("the arguments must be a JSON object, not %s", describe(tok))
	}
	if err := checkObject(dec, rv.Type().Elem(), "", 1); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the arguments object")
	}
	// The keys are now known to be exact and unique, so encoding/json's case-insensitive
	// matching can only ever pick the field of the same name.
	dec = json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("argument %q: want %s, got a JSON %s", te.Field, kindName(te.Type), te.Value)
		}
		return err
	}
	return nil
}

// Object decodes raw as a JSON object of any keys (a tool whose arguments have no Go type,
// such as an MCP tool's), with the same duplicate rules as Decode.
func Object(raw []byte) (map[string]any, error) {
	m := map[string]any{}
	if err := Decode(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

// MaxDepth bounds how deeply arguments may nest (the walk recurses once per level).
const MaxDepth = 200

// checkObject reads an object's members after its '{' up to and including its '}'.
func checkObject(dec *json.Decoder, t reflect.Type, path string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("the arguments nest deeper than %d levels", MaxDepth)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var fields map[string]reflect.Type // struct: exact json name -> type
	var folded map[string]string       // struct: fold key -> json name
	elem := t                          // map: value type
	switch {
	case t.Kind() == reflect.Struct:
		fields, folded = structFields(t)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		elem = t.Elem()
	case t.Kind() == reflect.Interface || t == rawMessage:
		// Any JSON: keys are free, duplicates are still ambiguous.
	default:
		return fmt.Errorf("argument %s: want %s, got a JSON object", name(path), kindName(t))
	}
	seen := map[string]string{} // fold key -> the spelling seen first
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntaxErr(err)
		}
		key := tok.(string)
		kp := join(path, key)
		fk := foldKey(key)
		if prev, dup := seen[fk]; dup {
			if prev == key {
				return fmt.Errorf("argument %q appears twice", kp)
			}
			return fmt.Errorf("arguments %q and %q are the same key in a different case; keys are case-sensitive and must not repeat", join(path, prev), kp)
		}
		// Exact duplicates are ambiguous anywhere; case-folded ones only where a reader
		// folds: struct fields and string maps (HTTP headers are case-insensitive too).
		if fields != nil || t.Kind() == reflect.Map {
			seen[fk] = key
		} else {
			if _, dup := seen[key]; dup {
				return fmt.Errorf("argument %q appears twice", kp)
			}
			seen[key] = key
		}
		vt := elem
		if fields != nil {
			ft, ok := fields[key]
			if !ok {
				if want, near := folded[fk]; near {
					return fmt.Errorf("unknown argument %q (the argument is %q; keys are case-sensitive)", kp, join(path, want))
				}
				return fmt.Errorf("unknown argument %q", kp)
			}
			vt = ft
		}
		if err := checkValue(dec, vt, kp, depth+1); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return syntaxErr(err)
}

func checkValue(dec *json.Decoder, t reflect.Type, path string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("the arguments nest deeper than %d levels", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return syntaxErr(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // scalars: their types are checked by the decode
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch d {
	case '{':
		return checkObject(dec, t, path, depth)
	case '[':
		et := t
		switch t.Kind() {
		case reflect.Slice, reflect.Array:
			if t != rawMessage {
				et = t.Elem()
			}
		case reflect.Interface:
		default:
			return fmt.Errorf("argument %s: want %s, got a JSON array", name(path), kindName(t))
		}
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, et, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return syntaxErr(err)
	}
	return fmt.Errorf("argument %s: unexpected %v", name(path), d)
}

func structFields(t reflect.Type) (map[string]reflect.Type, map[string]string) {
	fields, folded := map[string]reflect.Type{}, map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == "-" {
			continue
		}
		if n == "" {
			n = f.Name
		}
		fields[n] = f.Type
		folded[foldKey(n)] = n
	}
	return fields, folded
}

// foldKey maps s to one representative of its Unicode simple case-folding class: the
// smallest rune of each rune's fold orbit. Two keys a case-insensitive reader (such as
// encoding/json, which folds K, k and the Kelvin sign together, and s with the long s ſ)
// would treat as one have the same fold key.
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < m {
				m = f
			}
		}
		b.WriteRune(m)
	}
	return b.String()
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func name(path string) string {
	if path == "" {
		return "object"
	}
	return fmt.Sprintf("%q", path)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return string(v)
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprint(tok)
}

func syntaxErr(err error) error {
	if err == nil {
		return nil
	}
	if err == io.EOF {
		return errors.New("the arguments end early (truncated JSON)")
	}
	return fmt.Errorf("the arguments are not valid JSON: %w", err)
}
