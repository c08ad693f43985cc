package apptest

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// Scrape returns the replica's metrics, from its metrics listener.
func Scrape(t testing.TB, r *Replica) string {
	t.Helper()
	res, err := (&http.Client{Transport: unchecked(r.client.Transport)}).Get(r.MetricsURL + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %s (%v)", res.StatusCode, b, err)
	}
	return string(b)
}

// WantMetric fails unless the replica's /metrics has the sample line.
func WantMetric(t testing.TB, r *Replica, sample string) {
	t.Helper()
	m := Scrape(t, r)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + `$`).MatchString(m) {
		name, _, _ := strings.Cut(sample, "{")
		name, _, _ = strings.Cut(name, " ")
		t.Errorf("/metrics lacks %q; it has:\n%s", sample, GrepLines(m, name))
	}
}

// GrepLines returns the lines of s that contain substr, trimmed.
func GrepLines(s, substr string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, substr) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}
