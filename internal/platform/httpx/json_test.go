package httpx

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

// order is shaped like the bodies the flows decode: a nested array of
// objects, a pointer field and a field named by its Go name.
type order struct {
	Items []orderItem `json:"items"`
	Note  *string     `json:"note,omitempty"`
	Meta  struct {
		Tags []string `json:"tags"`
	} `json:"meta"`
	Hidden string `json:"-"`
	Plain  int
}

type orderItem struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		body string
		// wantDetail must appear in the refusal's detail; "" means accepted.
		wantDetail string
	}{
		{"Valid", `{"items":[{"sku":"SKU-1","quantity":2}],"note":"hi","meta":{"tags":["a"]},"Plain":3}`, ""},
		{"EmptyBody", ``, ""},
		{"WhitespaceBody", " \n\t ", ""},
		{"EmptyObject", `{}`, ""},
		{"TrailingWhitespace", "{}\n", ""},

		{"Malformed", `{"items":`, "malformed JSON"},
		{"MalformedSyntax", `{"items" [}`, "malformed JSON"},
		{"NotAnObject", `[1,2]`, "must be a JSON object"},
		{"UnknownField", `{"itemz":[]}`, `unknown field "itemz"`},
		{"UnknownNestedField", `{"items":[{"sku":"A","qty":1}]}`, `unknown field "qty"`},
		{"IgnoredFieldIsUnknown", `{"Hidden":"x"}`, `unknown field "Hidden"`},
		{"CaseVariantKey", `{"items":[{"SKU":"A","quantity":1}]}`, `unknown field items[0].SKU (did you mean "sku"?)`},
		{"CaseVariantTopLevel", `{"Items":[]}`, `unknown field Items (did you mean "items"?)`},
		{"CaseVariantGoName", `{"plain":1}`, `unknown field plain (did you mean "Plain"?)`},
		{"CaseVariantAfterExactKey", `{"items":[],"ITEMS":[]}`, `did you mean "items"?`},
		{"DuplicateKey", `{"items":[],"items":[{"sku":"A","quantity":1}]}`, "duplicate field items"},
		{"DuplicateKeyNested", `{"meta":{"tags":[],"tags":["x"]}}`, "duplicate field meta.tags"},
		{"DuplicateKeyInArrayOfObjects", `{"items":[{"sku":"A","quantity":1},{"sku":"B","quantity":1,"quantity":100}]}`, "duplicate field items[1].quantity"},
		{"DuplicateKeyInsideUnknownField", `{"extra":{"a":1,"a":2}}`, "duplicate field extra.a"},
		{"TrailingObject", `{} {}`, "single JSON object"},
		{"TrailingGarbage", `{}x`, "single JSON object"},
		{"TrailingArray", `{"items":[]}[]`, "single JSON object"},
		{"WrongTypeTopLevel", `{"items":"A"}`, "field items: must be an array, not string"},
		{"WrongTypeNested", `{"items":[{"sku":"A","quantity":"2"}]}`, "field items.quantity: must be an integer, not string"},
		{"WrongTypeString", `{"items":[{"sku":7,"quantity":1}]}`, "field items.sku: must be a string, not number"},
		{"WrongTypeFraction", `{"items":[{"sku":"A","quantity":1.5}]}`, "field items.quantity: must be an integer"},
		{"WrongTypeObject", `{"meta":[]}`, "field meta: must be an object, not array"},
		{"ControlCharacterNUL", `{"items":[{"sku":"A\u0000","quantity":1}]}`, "items[0].sku: must not contain control characters"},
		{"ControlCharacterBell", `{"meta":{"tags":["ok","a\u0007"]}}`, "meta.tags[1]: must not contain control characters"},
		{"ControlCharacterTab", `{"note":"a\tb"}`, "note: must not contain control characters"},
		{"ControlCharacterNewline", `{"note":"a\nb"}`, "note: must not contain control characters"},
		{"ControlCharacterDEL", `{"note":"a\u007f"}`, "note: must not contain control characters"},
		{"ControlCharacterC1", `{"note":"a\u0085"}`, "note: must not contain control characters"},
		{"ControlCharacterRawC1", "{\"note\":\"a\u009fb\"}", "note: must not contain control characters"},
		{"ControlCharacterInKey", `{"items":[],"a\u0001":1}`, "must not contain control characters"},
		{"ControlCharacterUnknownField", `{"extra":"\u0000"}`, "extra: must not contain control characters"},
		{"PrintableUnicode", `{"note":"caf\u00e9 \u2603 \ud83d\ude00"}`, ""},
		{"RawUnicode", "{\"note\":\"caf\u00e9 \u2603\"}", ""},
		// Bytes that are not UTF-8 are refused, not rewritten to U+FFFD
		// (encoding/json's behaviour) and stored so.
		{"InvalidUTF8", "{\"note\":\"\xff\xfe\"}", "body is not valid UTF-8 (at byte 9)"},
		{"InvalidUTF8Truncated", "{\"note\":\"caf\xc3\"}", "body is not valid UTF-8 (at byte 12)"},
		{"InvalidUTF8Surrogate", "{\"note\":\"\xed\xa0\x80\"}", "not valid UTF-8"},
		{"InvalidUTF8InKey", "{\"no\xfete\":\"a\"}", "not valid UTF-8"},
		{"InvalidUTF8OutsideStrings", "{\"items\":[]}\xff", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dst order
			err := Decode([]byte(tt.body), &dst)
			if tt.wantDetail == "" {
				if err != nil {
					t.Fatalf("Decode(%q) = %v, want nil", tt.body, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode(%q) = nil, want a refusal containing %q", tt.body, tt.wantDetail)
			}
			p, ok := problem.As(err)
			if !ok {
				t.Fatalf("Decode(%q) = %T %v, want *problem.Error", tt.body, err, err)
			}
			if p.Code != problem.Invalid {
				t.Errorf("code = %q, want %q", p.Code, problem.Invalid)
			}
			if !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, tt.wantDetail)
			}
		})
	}
}

// The last of two duplicate keys must not silently win (encoding/json's
// behaviour): a client that sent quantity 1 and quantity 100 gets a 400,
// not an order for 100.
func TestDecode_DuplicateKeyDoesNotReachTheValue(t *testing.T) {
	var dst orderItem
	err := Decode([]byte(`{"sku":"A","quantity":1,"quantity":100}`), &dst)
	if problem.CodeOf(err) != problem.Invalid {
		t.Fatalf("Decode = %v, want invalid_request", err)
	}
	if dst.Quantity != 0 {
		t.Errorf("Quantity = %d after a refusal, want the value untouched (0)", dst.Quantity)
	}
}

func TestDecode_Values(t *testing.T) {
	var dst order
	body := `{"items":[{"sku":"SKU-1","quantity":2},{"sku":"SKU-2","quantity":3}],"note":"n","meta":{"tags":["a","b"]},"Plain":7}`
	if err := Decode([]byte(body), &dst); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(dst.Items) != 2 || dst.Items[0] != (orderItem{"SKU-1", 2}) || dst.Items[1] != (orderItem{"SKU-2", 3}) {
		t.Errorf("Items = %+v", dst.Items)
	}
	if dst.Note == nil || *dst.Note != "n" {
		t.Errorf("Note = %v, want n", dst.Note)
	}
	if got := strings.Join(dst.Meta.Tags, ","); got != "a,b" {
		t.Errorf("Meta.Tags = %q, want a,b", got)
	}
	if dst.Plain != 7 {
		t.Errorf("Plain = %d, want 7", dst.Plain)
	}
}

// Decoding into a map still refuses duplicate keys: there is no struct to
// check names against, but the last value would still win silently.
func TestDecode_Map(t *testing.T) {
	var dst map[string]int
	if err := Decode([]byte(`{"a":1,"A":2}`), &dst); err != nil {
		t.Fatalf("case-distinct map keys: %v, want nil", err)
	}
	if err := Decode([]byte(`{"a":1,"a":2}`), &dst); problem.CodeOf(err) != problem.Invalid {
		t.Fatalf("duplicate map key: %v, want invalid_request", err)
	}
}

func TestBind(t *testing.T) {
	e := echo.New()
	t.Run("Body", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodPost, "/things/from-path?sku=from-query", strings.NewReader(`{"quantity":3}`))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		c := e.NewContext(req, httptest.NewRecorder())
		c.SetParamNames("sku")
		c.SetParamValues("from-path")
		var dst orderItem
		if err := Bind(c, &dst); err != nil {
			t.Fatalf("Bind: %v", err)
		}
		// Bind reads the body only: neither the path nor the query may fill a field.
		if dst != (orderItem{Quantity: 3}) {
			t.Errorf("dst = %+v, want only Quantity 3", dst)
		}
	})
	t.Run("EmptyBody", func(t *testing.T) {
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/", http.NoBody), httptest.NewRecorder())
		var dst orderItem
		if err := Bind(c, &dst); err != nil {
			t.Fatalf("Bind of an empty body: %v, want nil", err)
		}
	})
	t.Run("UnknownField", func(t *testing.T) {
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte(`{"x":1}`))), httptest.NewRecorder())
		var dst orderItem
		if err := Bind(c, &dst); problem.CodeOf(err) != problem.Invalid {
			t.Fatalf("Bind = %v, want invalid_request", err)
		}
	})
	t.Run("MaxBytesError", func(t *testing.T) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"sku":"toolong"}`))
		req.Body = http.MaxBytesReader(rec, req.Body, 4)
		c := e.NewContext(req, rec)
		var dst orderItem
		if err := Bind(c, &dst); problem.CodeOf(err) != problem.PayloadTooLarge {
			t.Fatalf("Bind = %v, want payload_too_large", err)
		}
	})
}

func TestJSON(t *testing.T) {
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)
	if err := JSON(c, http.StatusCreated, map[string]string{"name": "<b>&"}); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if rec.Code != http.StatusCreated {
		t.Errorf("status = %d, want 201", rec.Code)
	}
	if got := rec.Header().Get(echo.HeaderContentType); got != echo.MIMEApplicationJSON {
		t.Errorf("Content-Type = %q, want %q", got, echo.MIMEApplicationJSON)
	}
	// HTML is not escaped: the API returns names as the client sent them.
	if got, want := rec.Body.String(), "{\"name\":\"<b>&\"}\n"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

// nested returns a JSON object whose member "a" nests arrays until the
// whole body is depth containers deep: {"a":[[…]]}.
func nested(depth int) string {
	return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

// A body may nest arrays and objects 32 deep, no deeper; the refusal names
// the limit, wherever the nesting hides (a known field, an unknown one, an
// object of objects, a body that never closes).
func TestDecode_Nesting(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		accepted bool
	}{
		{"AtLimit", nested(32), true},
		{"OverLimit", nested(33), false},
		{"Objects", strings.Repeat(`{"a":`, 33) + "1" + strings.Repeat("}", 33), false},
		{"ObjectsAtLimit", strings.Repeat(`{"a":`, 32) + "1" + strings.Repeat("}", 32), true},
		{"Unclosed", strings.Repeat("[", 60_000), false},
		{"UnclosedInsideField", `{"a":` + strings.Repeat("[", 60_000), false},
		{"AfterElements", `{"a":[1,2,{"b":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dst map[string]any
			err := Decode([]byte(tt.body), &dst)
			if tt.accepted {
				if err != nil {
					t.Fatalf("Decode = %v, want nil", err)
				}
				return
			}
			p, ok := problem.As(err)
			if !ok || p.Code != problem.Invalid {
				t.Fatalf("Decode = %v, want invalid_request", err)
			}
			if !strings.Contains(p.Detail, "more than 32 deep") {
				t.Errorf("detail = %q, want it to name the limit of 32", p.Detail)
			}
		})
	}
	t.Run("IntoStruct", func(t *testing.T) {
		var dst order
		body := `{"items":[{"sku":"A","quantity":1}],"meta":{"tags":` + strings.Repeat("[", 60_000) + `}`
		if err := Decode([]byte(body), &dst); err == nil || !strings.Contains(err.Error(), "more than 32 deep") {
			t.Fatalf("Decode = %v, want the nesting refused", err)
		}
	})
}

// Refusing a deep body costs memory bounded by the limit, not by the body:
// the check once built a path string per level, so 60,000 '[' (a 60 KB
// body) allocated about 10 GB and took over a minute. A syntax error
// before the brackets, or brackets after the object, stop the decoder
// just as early.
func TestDecode_NestingCost(t *testing.T) {
	deep := strings.Repeat("[", 60_000)
	tests := []struct{ name, body string }{
		{"1000", strings.Repeat("[", 1_000)},
		{"10000", strings.Repeat("[", 10_000)},
		{"60000", deep},
		{"60000Objects", strings.Repeat(`{"":`, 15_000)},
		{"SyntaxErrorFirst", `{"a" ` + deep},
		{"AfterTheObject", `{} ` + deep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			var dst order
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			const runs = 10
			for range runs {
				if err := Decode(body, &dst); problem.CodeOf(err) != problem.Invalid {
					t.Fatalf("Decode = %v, want invalid_request", err)
				}
			}
			runtime.ReadMemStats(&after)
			// Less than the body itself: the refusal reads no further
			// than the 33rd bracket or the first syntax error.
			perRun := (after.TotalAlloc - before.TotalAlloc) / runs
			if perRun > 64<<10 {
				t.Errorf("Decode of %d bytes allocated %d bytes, want at most 64 KiB", len(body), perRun)
			}
			allocs := testing.AllocsPerRun(runs, func() { _ = Decode(body, &dst) })
			if allocs > 500 {
				t.Errorf("Decode of %d bytes made %.0f allocations, want at most 500", len(body), allocs)
			}
			t.Logf("%d bytes refused with %d bytes in %.0f allocations", len(body), perRun, allocs)
		})
	}
}
