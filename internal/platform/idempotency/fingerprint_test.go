package idempotency

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := fingerprint("POST", "/v1/orders", []byte(`{"items":[{"sku":"A","quantity":1}],"note":"x"}`))
	tests := []struct {
		name         string
		method, path string
		body         string
		same         bool
	}{
		{"Identical", "POST", "/v1/orders", `{"items":[{"sku":"A","quantity":1}],"note":"x"}`, true},
		{"KeyOrderAndWhitespace", "POST", "/v1/orders", " {\"note\":\"x\",\n\t\"items\":[ {\"quantity\":1,\"sku\":\"A\"} ]} ", true},
		{"EscapedSameString", "POST", "/v1/orders", `{"items":[{"sku":"\u0041","quantity":1}],"note":"x"}`, true},
		{"OtherValue", "POST", "/v1/orders", `{"items":[{"sku":"A","quantity":2}],"note":"x"}`, false},
		{"NumberSpelling", "POST", "/v1/orders", `{"items":[{"sku":"A","quantity":1.0}],"note":"x"}`, false},
		{"ArrayOrder", "POST", "/v1/orders", `{"items":[{"sku":"A","quantity":1}],"note":["x"]}`, false},
		{"KeyCase", "POST", "/v1/orders", `{"Items":[{"sku":"A","quantity":1}],"note":"x"}`, false},
		{"DuplicateKey", "POST", "/v1/orders", `{"items":[{"sku":"A","quantity":1}],"note":"y","note":"x"}`, false},
		{"OtherPath", "POST", "/v1/orders/2", `{"items":[{"sku":"A","quantity":1}],"note":"x"}`, false},
		{"OtherMethod", "PUT", "/v1/orders", `{"items":[{"sku":"A","quantity":1}],"note":"x"}`, false},
		{"TrailingData", "POST", "/v1/orders", `{"items":[{"sku":"A","quantity":1}],"note":"x"} {}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fingerprint(tt.method, tt.path, []byte(tt.body))
			if same := bytes.Equal(got, base); same != tt.same {
				t.Fatalf("same fingerprint = %v, want %v", same, tt.same)
			}
		})
	}
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want string
		ok   bool
	}{
		{"", "", true},
		{" \n", "", true},
		{`{"b":[1, {"d":null,"c":true}],"a":"<&>"}`, `{"a":"\u003c\u0026\u003e","b":[1,{"c":true,"d":null}]}`, true},
		{`12345678901234567890`, `12345678901234567890`, true},
		{`{"a":1,"a":1}`, "", false},
		{`{"a":`, "", false},
		{"not json", "", false},
		{"{\"a\":\"\xff\"}", "", false},
		// As deep as a request body may nest (httpx.MaxNesting), and deeper:
		// the handler refuses that body, so it is fingerprinted as bytes.
		{strings.Repeat(`{"a":`, 31) + "[1]" + strings.Repeat("}", 31), strings.Repeat(`{"a":`, 31) + "[1]" + strings.Repeat("}", 31), true},
		{strings.Repeat(`{"a":`, 32) + "[1]" + strings.Repeat("}", 32), "", false},
	}
	for _, tt := range tests {
		got, ok := canonicalJSON([]byte(tt.body))
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("canonicalJSON(%q) = %q, %v; want %q, %v", tt.body, got, ok, tt.want, tt.ok)
		}
	}
}

// Fingerprinting a deep body costs memory bounded by the nesting limit:
// nested objects were each re-encoded into their parent's buffer, so 64 KiB
// of {"":{"":…}} allocated about 470 MB before any handler ran.
func TestFingerprint_DeepCost(t *testing.T) {
	const size = 64 << 10
	levels := (size - 1) / len(`{"":}`)
	tests := []struct{ name, body string }{
		{"Objects", strings.Repeat(`{"":`, levels) + "1" + strings.Repeat("}", levels)},
		{"Arrays", strings.Repeat("[", size/2) + strings.Repeat("]", size/2)},
		{"Unclosed", strings.Repeat(`{"":`, size/4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			const runs = 5
			for range runs {
				fingerprint("POST", "/v1/orders", body)
			}
			runtime.ReadMemStats(&after)
			if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 256<<10 {
				t.Errorf("fingerprint of %d bytes allocated %d bytes, want at most 256 KiB", len(body), perRun)
			}
		})
	}
}
