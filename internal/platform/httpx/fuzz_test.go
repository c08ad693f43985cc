package httpx

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/platform/problem"
)

// FuzzDecode feeds arbitrary bodies to the strict decoder. Whatever the
// body, Decode must not panic, must refuse with a 400 invalid_request that
// has a detail, and may accept only a body that nests at most MaxNesting
// deep and that encoding/json reads as the same value.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"a":1,"b":[true,null,"x"],"c":{"d":-1.5e3}}`,
		nested(MaxNesting),
		nested(MaxNesting + 1),
		strings.Repeat(`{"a":`, MaxNesting+1) + "1" + strings.Repeat("}", MaxNesting+1),
		strings.Repeat("[", 60_000),
		`{"a":` + strings.Repeat("[", 60_000),
		`{"a" ` + strings.Repeat("[", 60_000),
		`{} ` + strings.Repeat("[", 60_000),
		`{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}`,
		`{"a":1,"a":2}`,
		`{"a":[{"b":1,"b":2}]}`,
		`{"a":`,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got map[string]any
		err := Decode(body, &got)
		if err != nil {
			if p, ok := problem.As(err); !ok || p.Code != problem.Invalid || p.Detail == "" {
				t.Fatalf("Decode(%q) = %v (%T), want an invalid_request problem with a detail", body, err, err)
			}
			return
		}
		if d := nestingDepth(body); d > MaxNesting {
			t.Fatalf("Decode(%q) accepted a body %d deep, want at most %d", body, d, MaxNesting)
		}
		if strings.TrimSpace(string(body)) == "" {
			return // an empty body reads as {}
		}
		var plain map[string]any
		if err := json.Unmarshal(body, &plain); err != nil {
			t.Fatalf("Decode accepted %q, encoding/json refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(got, plain) {
			t.Fatalf("Decode(%q) = %v, encoding/json reads %v", body, got, plain)
		}
	})
}

// nestingDepth is how deep body nests arrays and objects, counted outside
// strings, independently of the decoder.
func nestingDepth(body []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
