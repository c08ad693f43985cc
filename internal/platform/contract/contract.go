// Package contract holds the service to its OpenAPI document
// (docs/openapi.yaml) from the outside: a Transport that any HTTP client of
// the API can send through checks every request it carries and every answer
// it gets back against the document, with kin-openapi's openapi3filter,
// and reports each mismatch. The HTTP tests send all their requests through
// it, so a handler that drifts from the document, or a document that drifts
// from a handler, fails the tests; the document cannot stay decorative.
//
// A request may break the contract on purpose (a hostile-input test sends
// invalid JSON, an unknown member, no Idempotency-Key): the test says so
// for that one request with OffContract. Its answer is still checked, and
// must be a refusal; and a request so marked that the document admits is
// reported too, so a mark cannot outlive the reason it was put there.
package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/shop-example/shop/docs"
)

// Spec is the loaded and validated OpenAPI document with its router.
type Spec struct {
	doc    *openapi3.T
	router routers.Router
}

// Load reads docs/openapi.yaml (embedded in package docs), validates it as
// an OpenAPI document and builds the router that matches requests to its
// operations.
func Load() (*Spec, error) {
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(docs.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("load openapi document: %w", err)
	}
	if err := doc.Validate(l.Context); err != nil {
		return nil, fmt.Errorf("validate openapi document: %w", err)
	}
	// The routers match a request's scheme, host and base path against the
	// servers; a test server's address is none of them. Matching on the
	// path alone is what checking a replica, wherever it listens, needs.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi router: %w", err)
	}
	return &Spec{doc: doc, router: router}, nil
}

// Operations returns every operation of the document as "METHOD /path",
// with the document's path templates ({id}), sorted.
func (s *Spec) Operations() []string {
	var ops []string
	for path, item := range s.doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// options are those of every check. Undocumented statuses fail (kin-openapi
// lets them pass by default). Defaults are not written into the request
// (it is sent as the client wrote it). Authentication is not checked here:
// a request without a token, or with a bad one, is one the contract answers
// (401), and the answer is checked like any other.
func options() *openapi3filter.Options {
	return &openapi3filter.Options{
		IncludeResponseStatus: true,
		SkipSettingDefaults:   true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
}

// exchange is one request, its body readable again, and the answer it got.
type exchange struct {
	req    *http.Request // its body readable
	status int
	header http.Header
	body   []byte
}

// check checks ex against the document. offContract is why the request
// breaks the contract on purpose, or "".
func (s *Spec) check(ctx context.Context, ex exchange, offContract string) error {
	route, params, err := s.router.FindRoute(ex.req)
	if err != nil {
		return s.checkUnrouted(ex, offContract, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: ex.req, PathParams: params, Route: route, Options: options()}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	var errs []error
	switch {
	case offContract == "" && reqErr != nil:
		errs = append(errs, fmt.Errorf("request: %w", reqErr))
	case offContract != "" && reqErr == nil:
		errs = append(errs, fmt.Errorf("request marked off contract (%s), but the document admits it: drop the mark", offContract))
	case offContract != "" && !refusal(ex.status):
		errs = append(errs, fmt.Errorf("request off contract (%s: %v) was answered %d, not refused with a 4xx", offContract, reqErr, ex.status))
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: ex.status, Header: ex.header, Options: options()}
	out.SetBodyBytes(ex.body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		errs = append(errs, fmt.Errorf("response: %w", err))
	}
	return errors.Join(errs...)
}

// checkUnrouted checks an exchange whose request names no operation of the
// document: only a request marked off contract may, and the service must
// have answered it with the problem the document gives for an unknown
// route (404) or method (405).
func (s *Spec) checkUnrouted(ex exchange, offContract string, routeErr error) error {
	if offContract == "" {
		return fmt.Errorf("request: no operation in the document: %w", routeErr)
	}
	want := http.StatusNotFound
	if errors.Is(routeErr, routers.ErrMethodNotAllowed) {
		want = http.StatusMethodNotAllowed
	}
	if ex.status != want {
		return fmt.Errorf("request to no operation (%v) answered %d, want %d", routeErr, ex.status, want)
	}
	if ct := ex.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		return fmt.Errorf("response %d: Content-Type %q, want application/problem+json", ex.status, ct)
	}
	ref := s.doc.Components.Schemas[fmt.Sprintf("Problem%d", want)]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("the document has no schema Problem%d", want)
	}
	var body any
	if err := jsonDecode(ex.body, &body); err != nil {
		return fmt.Errorf("response %d: %w", ex.status, err)
	}
	if err := ref.Value.VisitJSON(body, openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("response %d: body does not match Problem%d: %w", ex.status, want, err)
	}
	return nil
}

func refusal(status int) bool { return status >= 400 && status < 500 }

func jsonDecode(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	return nil
}
