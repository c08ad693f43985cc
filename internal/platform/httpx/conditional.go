package httpx

import "strings"

// NoneMatch reports whether the If-None-Match header values name etag, the
// current entity tag of the resource: then a GET answers 304 Not Modified.
// It uses the weak comparison RFC 9110 §13.1.2 asks for, so W/"1" matches
// "1"; "*" matches any current representation. A malformed value matches
// nothing: the request is answered in full, as if the header were absent.
func NoneMatch(values []string, etag string) bool {
	header := strings.TrimSpace(strings.Join(values, ","))
	if header == "" {
		return false
	}
	if header == "*" {
		return true
	}
	want := strings.TrimPrefix(etag, "W/")
	for {
		header = strings.TrimLeft(header, " \t,")
		if header == "" {
			return false
		}
		tag, rest, ok := cutEntityTag(header)
		if !ok {
			return false
		}
		if tag == want {
			return true
		}
		header = rest
	}
}

// cutEntityTag splits the first entity tag (RFC 9110 §8.8.3) off a list,
// returning it without W/ and with its quotes, and what follows it. The
// opaque part may hold a comma, so the list cannot be split on commas.
func cutEntityTag(s string) (tag, rest string, ok bool) {
	s = strings.TrimPrefix(s, "W/")
	if !strings.HasPrefix(s, `"`) {
		return "", "", false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", "", false
	}
	tag, rest = s[:end+2], strings.TrimLeft(s[end+2:], " \t")
	if rest != "" && rest[0] != ',' {
		return "", "", false
	}
	return tag, rest, true
}
