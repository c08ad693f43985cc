package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// checkKeys walks the JSON in body alongside the Go type t and rejects a
// duplicate key in any object and a key that matches a struct field only
// case-insensitively. Syntax and type errors are left to the decoder, which
// reports them better.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := walk(dec, t, "")
	var sentinel *keyError
	if errors.As(err, &sentinel) {
		return err
	}
	return nil
}

type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

func walk(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walk(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case '{':
		fields := jsonFields(t)
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			name := joinPath(path, key)
			if seen[key] {
				return &keyError{"duplicate field " + name}
			}
			seen[key] = true
			var ft reflect.Type
			if fields != nil {
				f, exact := fields[key]
				if !exact {
					for k := range fields {
						if strings.EqualFold(k, key) {
							return &keyError{fmt.Sprintf("unknown field %s (did you mean %q?)", name, k)}
						}
					}
				}
				ft = f
			}
			if err := walk(dec, ft, name); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// jsonFields maps the JSON names of a struct's exported fields to their
// types; nil when t is not a struct (then any key is the decoder's business).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
