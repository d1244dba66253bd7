package v1

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// exactNames refuses what encoding/json lets through in a document it
// decoded into a value of type t: a key that names a field only when
// case is ignored ("Role" for "role"), and a key given twice in one
// object, of which encoding/json silently keeps the last. Either lets two
// readers of one document see two different documents. path is where
// data sits in the whole document.
func exactNames(data []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil // its own decoding
	}
	data = bytes.TrimSpace(data)
	switch {
	case len(data) > 0 && data[0] == '{' && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		var fields map[string]reflect.Type
		if t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		return eachMember(data, func(key string, value []byte) error {
			at := joinPath(path, key)
			if seen[key] {
				return fieldErr(at, "given twice")
			}
			seen[key] = true
			if t.Kind() == reflect.Map {
				return exactNames(value, t.Elem(), at)
			}
			ft, ok := fields[key]
			if !ok {
				for name := range fields {
					if strings.EqualFold(name, key) {
						return fieldErr(at, "unknown field; names are case-sensitive: %q", name)
					}
				}
				return nil // DisallowUnknownFields refused it already
			}
			return exactNames(value, ft, at)
		})
	case len(data) > 0 && data[0] == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		var items []json.RawMessage
		if err := json.Unmarshal(data, &items); err != nil {
			return err
		}
		for i, item := range items {
			if err := exactNames(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// eachMember calls f with each key of the JSON object data, in order,
// and its raw value.
func eachMember(data []byte, f func(key string, value []byte) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		if err := f(key, value); err != nil {
			return err
		}
	}
	return nil
}

// jsonFields are a struct's fields by their JSON names, those of embedded
// structs included, as encoding/json sees them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, t := range jsonFields(ft) {
					if _, ok := out[n]; !ok {
						out[n] = t
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
