package postgres

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotURL: a connection string that is not a postgres:// or
// postgresql:// URL (a key=value string, another scheme).
var ErrNotURL = errors.New("want a postgres:// URL")

// CanonicalURL checks raw as libpq reads a connection URI (pgconn's
// parser follows libpq's to the byte) and returns it in a form that Go's
// net/url reads too, so that code which sets a parameter on it (the
// migrations' driver, the race lab's search_path, the masked URL in the
// start-up log) sees the same server as pgx. libpq takes a percent-encoded
// host in the authority, such as a socket directory
// (postgres://%2Fvar%2Frun%2Fpostgresql/db), which net/url refuses; such a
// URL gets its hosts and ports as the host and port query parameters,
// which libpq documents as the same thing. A URL that net/url reads is
// returned as it is. The rewritten URL is checked to name the same
// servers, database, user and parameters as raw.
func CanonicalURL(raw string) (string, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return "", ErrNotURL
	}
	want, err := parseSettings(raw)
	if err != nil {
		return "", err
	}
	if _, err := url.Parse(raw); err == nil {
		return raw, nil
	}

	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hostlist := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hostlist = authority[:i+1], authority[i+1:]
	}
	var hosts, ports []string
	for _, hp := range strings.Split(hostlist, ",") {
		host, port := hp, ""
		if i := strings.LastIndex(hp, ":"); i >= 0 && !strings.Contains(hp[i:], "]") {
			host, port = hp[:i], hp[i+1:]
		}
		if host, err = url.PathUnescape(host); err != nil {
			return "", fmt.Errorf("host: %w", err)
		}
		hosts, ports = append(hosts, host), append(ports, port)
	}
	path, query, _ := strings.Cut(tail, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("query: %w", err)
	}
	// A parameter in the query wins over the authority, in libpq as here.
	if !q.Has("host") {
		q.Set("host", strings.Join(hosts, ","))
	}
	if !q.Has("port") && slices.ContainsFunc(ports, func(p string) bool { return p != "" }) {
		q.Set("port", strings.Join(ports, ","))
	}
	out := scheme + "://" + userinfo + path + "?" + q.Encode()
	if _, err := url.Parse(out); err != nil {
		return "", fmt.Errorf("no form of this URL that net/url reads: %w", err)
	}
	got, err := parseSettings(out)
	if err != nil || !sameServers(want, got) {
		return "", errors.New("no form of this URL that net/url reads names the same servers")
	}
	return out, nil
}

// fileSettings name files that pgconn reads while it parses (the TLS
// certificates and keys): a URL is checked here as text, on a machine
// that may not have them (a config check, a render of the manifests);
// the connection reads them.
var fileSettings = []string{"sslrootcert", "sslcert", "sslkey", "sslcrl", "sslcrldir", "sslpassword"}

// parseSettings is pgconn's reading of raw, without the files its query
// names.
func parseSettings(raw string) (*pgconn.Config, error) {
	head, query, found := strings.Cut(raw, "?")
	if found {
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, fmt.Errorf("query: %w", err)
		}
		for _, k := range fileSettings {
			q.Del(k)
		}
		raw = head + "?" + q.Encode()
	}
	return pgconn.ParseConfig(raw)
}

// sameServers reports whether a and b connect to the same servers, as
// the same user, to the same database, with the same parameters.
func sameServers(a, b *pgconn.Config) bool {
	if a.Host != b.Host || a.Port != b.Port || a.Database != b.Database || a.User != b.User ||
		a.Password != b.Password || !maps.Equal(a.RuntimeParams, b.RuntimeParams) || len(a.Fallbacks) != len(b.Fallbacks) {
		return false
	}
	for i, f := range a.Fallbacks {
		if f.Host != b.Fallbacks[i].Host || f.Port != b.Fallbacks[i].Port {
			return false
		}
	}
	return true
}
