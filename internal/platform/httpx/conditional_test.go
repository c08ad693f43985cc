package httpx

import "testing"

func TestNoneMatch(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   bool
	}{
		{"Absent", nil, false},
		{"Empty", []string{""}, false},
		{"Same", []string{`"3"`}, true},
		{"Weak", []string{`W/"3"`}, true},
		{"Star", []string{`*`}, true},
		{"StarWithSpaces", []string{` * `}, true},
		{"Other", []string{`"4"`}, false},
		{"List", []string{`"1", "2", "3"`}, true},
		{"ListNoSpaces", []string{`"1",W/"3"`}, true},
		{"ListOfOthers", []string{`"1", W/"2"`}, false},
		{"TwoHeaders", []string{`"1"`, `"3"`}, true},
		{"CommaInsideATag", []string{`"a,\"3\"", "3"`}, false},
		{"CommaInsideAnotherTag", []string{`"a,b", "3"`}, true},
		{"EmptyElements", []string{`, ,"3"`}, true},
		{"Unquoted", []string{`3`}, false},
		{"Unterminated", []string{`"3`}, false},
		{"TrailingGarbage", []string{`"3" x`}, false},
		{"GarbageBeforeMatch", []string{`x, "3"`}, false},
		{"StarInAList", []string{`"1", *`}, false},
		{"LowercaseWeak", []string{`w/"3"`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NoneMatch(tt.values, `"3"`); got != tt.want {
				t.Errorf("NoneMatch(%q, \"3\") = %v, want %v", tt.values, got, tt.want)
			}
		})
	}
}
