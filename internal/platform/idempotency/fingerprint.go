package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/shop-example/shop/internal/platform/httpx"
)

// fingerprint identifies the request a key was first used for: method, the
// actual path (the same key on another order id is another request) and the
// canonical body, so that a client re-encoding the same JSON (other key
// order, other whitespace) is still sending the same request.
func fingerprint(method, path string, body []byte) []byte {
	h := sha256.New()
	// Method and path cannot hold a NUL, so the fields cannot run together.
	io.WriteString(h, method)
	h.Write([]byte{0})
	io.WriteString(h, path)
	h.Write([]byte{0})
	if canon, ok := canonicalJSON(body); ok {
		h.Write([]byte{'j'})
		h.Write(canon)
	} else {
		h.Write([]byte{'r'})
		h.Write(body)
	}
	return h.Sum(nil)
}

var (
	errDuplicateKey = errors.New("duplicate object key")
	errTooDeep      = errors.New("nested deeper than a request body may be")
)

// canonicalJSON re-encodes body with object members sorted by key and no
// whitespace; numbers keep their literal text. It reports false when body
// is not one valid JSON value, holds a duplicate object key (the strict
// decoder refuses those, so {"a":1,"a":2} must not pass for {"a":2}), or
// nests deeper than httpx.MaxNesting (the decoder refuses that too, and
// each level of nested objects is copied into its parent: a deep body
// would cost the square of its size); such a body is fingerprinted byte for
// byte. An empty body is canonically empty.
func canonicalJSON(body []byte) ([]byte, bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, true
	}
	if !utf8.Valid(body) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonicalValue(dec, &out, 0); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return out.Bytes(), true
}

// canonicalValue writes the next value of dec to out; depth is how many
// arrays and objects enclose it.
func canonicalValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		// A string, json.Number, bool or nil: encoding/json writes each in
		// one canonical way.
		b, err := json.Marshal(tok)
		if err != nil {
			return err
		}
		out.Write(b)
		return nil
	}
	if depth >= httpx.MaxNesting {
		return errTooDeep
	}
	switch delim {
	case '[':
		out.WriteByte('[')
		for i := 0; dec.More(); i++ {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := canonicalValue(dec, out, depth+1); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case '{':
		if err := canonicalObject(dec, out, depth); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unexpected %v", delim)
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

func canonicalObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	type member struct {
		key   string
		value []byte
	}
	var members []member
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object key %v", tok)
		}
		if seen[key] {
			return errDuplicateKey
		}
		seen[key] = true
		var value bytes.Buffer
		if err := canonicalValue(dec, &value, depth+1); err != nil {
			return err
		}
		members = append(members, member{key, value.Bytes()})
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return err
		}
		out.Write(k)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return nil
}
