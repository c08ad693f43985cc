package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// MaxNesting is how deep a request body may nest arrays and objects. The
// API's bodies nest three deep; the bound keeps a body that is nothing but
// brackets (64 KiB of '[') from costing more than a few hundred bytes.
const MaxNesting = 32

// checkKeys walks the JSON in body alongside the Go type t and rejects a
// duplicate key in any object, a key that matches a struct field only
// case-insensitively, nesting deeper than MaxNesting, and a control
// character in any string, key or value: one check for every text field of
// every request. Syntax errors are
// left to the decoder, which reports them better (with the byte they are
// at); the decoder stops at the same first syntax error the walk met, so it
// never reads past the nesting the walk allowed.
//
// The walk is linear in the body: the path to the current value is a stack
// of segments, turned into text only for the error that names it.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := walker{dec: dec, path: make([]segment, 0, MaxNesting)}
	err := w.walk(t)
	var refusal *keyError
	if errors.As(err, &refusal) {
		return err
	}
	return nil
}

// keyError is a refusal the walk itself found.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

// segment is one step of the path to a value: an object member's key, or
// an array element's index when index >= 0.
type segment struct {
	key   string
	index int
}

type walker struct {
	dec  *json.Decoder
	path []segment
}

func (w *walker) walk(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if text, ok := tok.(string); ok && hasControl(text) {
		return &keyError{w.field() + ": must not contain control characters"}
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	// This array or object sits len(w.path)+1 deep.
	if len(w.path) >= MaxNesting {
		return &keyError{fmt.Sprintf("body nests arrays and objects more than %d deep", MaxNesting)}
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			w.path = append(w.path, segment{index: i})
			if err := w.walk(elem); err != nil {
				return err
			}
			w.path = w.path[:len(w.path)-1]
		}
	case '{':
		fields := jsonFields(t)
		seen := map[string]bool{}
		for w.dec.More() {
			kt, err := w.dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			if hasControl(key) {
				return &keyError{w.field() + ": field names must not contain control characters"}
			}
			w.path = append(w.path, segment{key: key, index: -1})
			if seen[key] {
				return &keyError{"duplicate field " + w.where()}
			}
			seen[key] = true
			var ft reflect.Type
			if fields != nil {
				f, exact := fields[key]
				if !exact {
					for k := range fields {
						if strings.EqualFold(k, key) {
							return &keyError{fmt.Sprintf("unknown field %s (did you mean %q?)", w.where(), k)}
						}
					}
				}
				ft = f
			}
			if err := w.walk(ft); err != nil {
				return err
			}
			w.path = w.path[:len(w.path)-1]
		}
	}
	_, err = w.dec.Token() // the closing delimiter
	return err
}

// where spells the current path as the client wrote it: items[1].quantity.
func (w *walker) where() string {
	var b strings.Builder
	for _, s := range w.path {
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.key)
	}
	return b.String()
}

// field names the current value for a refusal: its path, or "body".
func (w *walker) field() string {
	if len(w.path) == 0 {
		return "body"
	}
	return w.where()
}

// hasControl reports whether s holds a control character (C0, DEL or C1).
// No text the API stores has a use for one, and some break what reads it
// later: PostgreSQL refuses NUL in text, a newline forges a log line.
func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
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
