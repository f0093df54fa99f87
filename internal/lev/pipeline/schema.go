package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// schemaFor derives a built-in tool's JSON schema from its argument type, so the schema
// the model is offered and the type the offer step decodes into cannot drift apart: one
// property per field (its json name), in field order, its JSON type from the Go type;
// required are the fields tagged schema:"required"; no other property is allowed (the
// strict decoder refuses one anyway).
func schemaFor[T Args]() json.RawMessage {
	return json.RawMessage(objectSchema(reflect.TypeOf((*T)(nil)).Elem()))
}

// objectSchema is the schema of a struct type (an argument type, or the element of an
// array argument such as edit_file's edits).
func objectSchema(t reflect.Type) string {
	var props bytes.Buffer
	required := []string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			panic(fmt.Sprintf("pipeline: %s.%s has no json name", t.Name(), f.Name))
		}
		if props.Len() > 0 {
			props.WriteByte(',')
		}
		k, _ := json.Marshal(name)
		props.Write(k)
		props.WriteByte(':')
		props.WriteString(jsonType(t, f))
		if f.Tag.Get("schema") == "required" {
			required = append(required, name)
		}
	}
	r, _ := json.Marshal(required)
	return `{"type":"object","properties":{` + props.String() + `},"required":` + string(r) + `,"additionalProperties":false}`
}

var rawMessageType = reflect.TypeOf(json.RawMessage(nil))

func jsonType(owner reflect.Type, f reflect.StructField) string {
	t := f.Type
	switch {
	case t == rawMessageType:
		return `{}` // any JSON value
	case t.Kind() == reflect.String:
		return `{"type":"string"}`
	case t.Kind() == reflect.Bool, t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Bool:
		return `{"type":"boolean"}`
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return `{"type":"integer"}`
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return `{"type":"array","items":{"type":"string"}}`
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return `{"type":"array","items":` + objectSchema(t.Elem()) + `}`
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String:
		return `{"type":"object","additionalProperties":{"type":"string"}}`
	}
	panic(fmt.Sprintf("pipeline: %s.%s: no JSON schema for %s", owner.Name(), f.Name, t))
}
