package idempotency

import (
	"bytes"
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
	}
	for _, tt := range tests {
		got, ok := canonicalJSON([]byte(tt.body))
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("canonicalJSON(%q) = %q, %v; want %q, %v", tt.body, got, ok, tt.want, tt.ok)
		}
	}
}
