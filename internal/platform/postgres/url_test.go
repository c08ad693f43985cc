package postgres

import (
	"errors"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestCanonicalURL: a URL that libpq accepts is accepted, and comes back
// in a form net/url reads that names the same servers; one net/url reads
// already comes back unchanged; what libpq refuses, or what is not a URL,
// is refused.
func TestCanonicalURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, raw string
		hosts     []string // the servers pgx connects to, in order
		port      uint16
		db        string
		user      string // "" is the default, the user running the test
	}{
		{"SocketDirectory", "postgres://%2Fvar%2Frun%2Fpostgresql/db", []string{"/var/run/postgresql"}, 5432, "db", ""},
		{"SocketDirectoryUserPort", "postgresql://shop:pw@%2Ftmp:5440/shop?sslmode=disable", []string{"/tmp"}, 5440, "shop", "shop"},
		{"TwoSocketDirectories", "postgres://%2Frun%2Fa:5433,%2Frun%2Fb:5433/db?target_session_attrs=read-write", []string{"/run/a", "/run/b"}, 5433, "db", ""},
		{"QueryHost", "postgresql:///db?host=/var/run/postgresql", []string{"/var/run/postgresql"}, 5432, "db", ""},
		{"TCP", "postgres://shop:shop@localhost:5432/shop?sslmode=disable", []string{"localhost"}, 5432, "shop", "shop"},
		// The CA file is the connection's to read, on the machine that
		// connects: the check reads the URL only.
		{"CertificateNotHere", "postgresql://app:pw@shop-pg-rw.shop:5432/app?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt&target_session_attrs=read-write",
			[]string{"shop-pg-rw.shop"}, 5432, "app", "app"},
		{"SocketDirectoryCertificateNotHere", "postgres://app@%2Frun%2Fpg/app?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
			[]string{"/run/pg"}, 5432, "app", "app"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalURL(tt.raw)
			if err != nil {
				t.Fatalf("CanonicalURL(%q): %v", tt.raw, err)
			}
			if _, err := url.Parse(got); err != nil {
				t.Errorf("net/url cannot read %q: %v", got, err)
			}
			if _, err := url.Parse(tt.raw); err == nil && got != tt.raw {
				t.Errorf("%q came back as %q; want it unchanged", tt.raw, got)
			}
			cfg, err := parseSettings(got)
			if err != nil {
				t.Fatal(err)
			}
			hosts := []string{cfg.Host}
			for _, f := range cfg.Fallbacks {
				hosts = append(hosts, f.Host)
			}
			if tt.user == "" {
				def, err := pgconn.ParseConfig("postgres:///")
				if err != nil {
					t.Fatal(err)
				}
				tt.user = def.User
			}
			if !equal(hosts, tt.hosts) || cfg.Port != tt.port || cfg.Database != tt.db || cfg.User != tt.user {
				t.Errorf("%q reaches %v port %d database %q as %q; want %v port %d database %q as %q",
					got, hosts, cfg.Port, cfg.Database, cfg.User, tt.hosts, tt.port, tt.db, tt.user)
			}
		})
	}
	for _, raw := range []string{"mysql://shop@localhost/shop", "host=/tmp dbname=shop", "postgres://shop:shop@local host:bad/shop", "postgres://%zz/db"} {
		if got, err := CanonicalURL(raw); err == nil {
			t.Errorf("CanonicalURL(%q) = %q, want it refused", raw, got)
		}
	}
	if _, err := CanonicalURL("host=/tmp"); !errors.Is(err, ErrNotURL) {
		t.Errorf("a key=value string: %v, want ErrNotURL", err)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
