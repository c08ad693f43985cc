package contract_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/shop-example/shop/internal/platform/contract"
)

// The document loads and validates as OpenAPI.
func TestLoad(t *testing.T) {
	s, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Operations()) == 0 {
		t.Fatal("the document has no operations")
	}
}

// recorder is a Reporter that keeps what it was told.
type recorder struct {
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// canned is an answer a fake service gives.
type canned struct {
	status int
	header map[string]string
	body   string
}

const (
	orderID  = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	goodUser = `{"id": "` + orderID + `", "name": "ann"}`
	problem  = `{"type": "https://shop.example/problems/%s", "title": "t", "status": %d, "code": "%s"}`
)

func problemOf(status int, code string) canned {
	return canned{status, map[string]string{"Content-Type": "application/problem+json"},
		fmt.Sprintf(problem, strings.ReplaceAll(code, "_", "-"), status, code)}
}

// Each case is one exchange; the transport must report it exactly when the
// exchange breaks the document. The drifts are those a handler or the
// document could make: a status, a member, a header, a code.
func TestTransport(t *testing.T) {
	json := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct {
		name         string
		method, path string
		header       map[string]string
		body         string
		offContract  string
		answer       canned
		wantReport   string // a part of the report; "" for none
	}{
		{"Valid", "GET", "/v1/me", nil, "", "", canned{200, json, goodUser}, ""},
		{"UndocumentedStatus", "GET", "/v1/me", nil, "", "", canned{418, json, goodUser}, "status is not supported"},
		{"MissingMember", "GET", "/v1/me", nil, "", "", canned{200, json, `{"id": "` + orderID + `"}`}, `"name"`},
		{"ExtraMember", "GET", "/v1/me", nil, "", "", canned{200, json, `{"id": "` + orderID + `", "name": "a", "admin": true}`}, "admin"},
		{"WrongContentType", "GET", "/v1/me", nil, "", "", canned{200, map[string]string{"Content-Type": "text/plain"}, goodUser}, "Content-Type"},
		{"ErrorNotProblemJSON", "GET", "/v1/me", nil, "", "", canned{401, map[string]string{"Content-Type": "application/json", "WWW-Authenticate": `Bearer realm="shop"`},
			fmt.Sprintf(problem, "unauthenticated", 401, "unauthenticated")}, "Content-Type"},
		{"MissingChallenge", "GET", "/v1/me", nil, "", "", problemOf(401, "unauthenticated"), "WWW-Authenticate"},
		{"WrongCode", "GET", "/v1/orders/" + orderID, map[string]string{"Authorization": "Bearer x"}, "", "", problemOf(404, "gone"), "code"},
		{"MissingLocation", "POST", "/v1/users", json, `{"name": "ann"}`, "",
			canned{201, json, `{"id": "` + orderID + `", "name": "ann", "token": "t"}`}, "Location"},
		{"MissingRetryAfter", "GET", "/v1/me", nil, "", "", problemOf(503, "unavailable"), "Retry-After"},
		{"InvalidRequest", "POST", "/v1/users", json, `{"name": "ann", "admin": true}`, "", problemOf(400, "invalid_request"), "request"},
		{"UnknownRoute", "GET", "/v1/nothing", nil, "", "", problemOf(404, "not_found"), "no operation"},
		{"OffContract", "POST", "/v1/users", json, `{"name": "ann", "admin": true}`, "unknown member", problemOf(400, "invalid_request"), ""},
		{"OffContractAdmitted", "POST", "/v1/users", json, `{"name": "ann"}`, "unknown member", problemOf(400, "invalid_request"), "drop the mark"},
		{"OffContractAccepted", "POST", "/v1/users", json, `{"name": 5}`, "name no string", canned{201, map[string]string{"Content-Type": "application/json", "Location": "/v1/me"},
			`{"id": "` + orderID + `", "name": "5", "token": "t"}`}, "not refused"},
		{"OffContractResponseStillChecked", "POST", "/v1/users", json, `{"name": 5}`, "name no string", problemOf(400, "no_such_code"), "code"},
		{"OffContractUnknownRoute", "GET", "/v1/nothing", nil, "", "no such route", problemOf(404, "not_found"), ""},
		{"OffContractWrongMethod", "DELETE", "/v1/me", nil, "", "no such method", problemOf(405, "method_not_allowed"), ""},
		{"OffContractUnknownRouteBadBody", "GET", "/v1/nothing", nil, "", "no such route", canned{404, json, `{}`}, "Content-Type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got = string(b)
				for k, v := range tc.answer.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.answer.status)
				_, _ = io.WriteString(w, tc.answer.body)
			}))
			defer srv.Close()
			spec, err := contract.Load()
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			client := &http.Client{Transport: &contract.Transport{Spec: spec, Report: rec}}
			ctx := context.Background()
			if tc.offContract != "" {
				ctx = contract.OffContract(ctx, tc.offContract)
			}
			req, err := http.NewRequestWithContext(ctx, tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)

			// The exchange is the service's, whatever the check found.
			if got != tc.body || string(body) != tc.answer.body || res.StatusCode != tc.answer.status {
				t.Errorf("the transport changed the exchange: sent %q, got %d %q", got, res.StatusCode, body)
			}
			switch {
			case tc.wantReport == "" && len(rec.errs) > 0:
				t.Errorf("reported a valid exchange: %v", rec.errs)
			case tc.wantReport != "" && len(rec.errs) != 1:
				t.Errorf("want one report naming %q, got %v", tc.wantReport, rec.errs)
			case tc.wantReport != "" && !strings.Contains(rec.errs[0], tc.wantReport):
				t.Errorf("report %q does not name %q", rec.errs[0], tc.wantReport)
			}
		})
	}
}

// A report goes to the Reporter the request carries, not the transport's.
func TestTransport_ReporterOfTheRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	spec, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	builder, sender := &recorder{}, &recorder{}
	client := &http.Client{Transport: &contract.Transport{Spec: spec, Report: builder}}
	req, _ := http.NewRequestWithContext(contract.WithReporter(context.Background(), sender), "GET", srv.URL+"/healthz", nil)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(builder.errs) != 0 || len(sender.errs) != 1 {
		t.Errorf("transport's reporter got %v, request's got %v; want the request's to get one", builder.errs, sender.errs)
	}
}
