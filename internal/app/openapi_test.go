package app_test

import (
	"bytes"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/internal/platform/contract"
)

// echoParam is a path parameter as echo spells it (:id); the document
// spells it {id}.
var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// Every route the router registers is an operation of docs/openapi.yaml,
// and every operation of the document is a registered route: a route added
// without its contract, or a contract left behind by a removed route, fails
// here. The HTTP tests check what each operation answers. The replica is a
// demo server's, as compose runs it: the shop's routes and those of the
// race lab attached to it (harness/lab), which the contract names too.
func TestOpenAPI_Routes(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	spec, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, r := range e.R(0).App.Echo.Routes() {
		routes = append(routes, r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(routes)
	routes = slices.Compact(routes)
	documented := spec.Operations()
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is registered but not in docs/openapi.yaml", r)
		}
	}
	for _, op := range documented {
		if !slices.Contains(routes, op) {
			t.Errorf("docs/openapi.yaml names %s, which no route serves", op)
		}
	}
	if len(routes) < 20 {
		t.Errorf("only %d routes registered: %v", len(routes), routes)
	}
}

// GET /openapi.yaml serves docs/openapi.yaml byte for byte.
func TestOpenAPI_Served(t *testing.T) {
	e := apptest.New(t, 1, nil)
	want, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res := e.R(0).Do(t, http.MethodGet, "/openapi.yaml", "", nil)
	apptest.WantStatus(t, res, http.StatusOK)
	if !bytes.Equal(res.Body, want) {
		t.Errorf("GET /openapi.yaml serves %d bytes that are not docs/openapi.yaml (%d bytes)", len(res.Body), len(want))
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type %q, want application/yaml", ct)
	}
}

// The pages are served by every replica, at / and under /web/, as the
// contract says (each exchange is checked against it), and name the
// replica that served them.
func TestWeb_Served(t *testing.T) {
	e := apptest.New(t, 1, nil)
	for path, ct := range map[string]string{"/": "text/html", "/web/seats.html": "text/html", "/web/app.css": "text/css"} {
		res := e.R(0).Do(t, http.MethodGet, path, "", nil)
		apptest.WantStatus(t, res, http.StatusOK)
		if got := res.Header.Get("Content-Type"); !strings.HasPrefix(got, ct) {
			t.Errorf("GET %s: Content-Type %q, want %s", path, got, ct)
		}
		if res.Header.Get("X-Served-By") == "" {
			t.Errorf("GET %s: no X-Served-By", path)
		}
	}
	apptest.WantProblem(t, e.R(0).Do(t, http.MethodGet, "/web/missing.js", "", nil), http.StatusNotFound, "not_found")
}
