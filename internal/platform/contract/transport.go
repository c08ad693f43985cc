package contract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Reporter is where a mismatch is reported: a *testing.T.
type Reporter interface {
	Errorf(format string, args ...any)
}

// Transport sends each request through Next and checks the exchange
// against Spec, reporting a mismatch to the Reporter the request's context
// carries (WithReporter), else to Report; with neither, the mismatch is the
// request's error. The caller gets the answer as the service sent it, body
// included, whatever the check found.
type Transport struct {
	Spec   *Spec
	Next   http.RoundTripper // nil means http.DefaultTransport
	Report Reporter
	// Skip, if set, names the exchanges that are not the service's to
	// answer for: another server's (the payment gateway's), or a load
	// balancer's own 502. Everything else is checked.
	Skip func(*http.Request, *http.Response) bool
}

type reporterKey struct{}

type offContractKey struct{}

// WithReporter returns ctx with r as the Reporter of the requests made with
// it: the test that sends a request hears of its mismatches, not whichever
// test built the client.
func WithReporter(ctx context.Context, r Reporter) context.Context {
	return context.WithValue(ctx, reporterKey{}, r)
}

// OffContract returns ctx marking the request made with it as breaking the
// contract on purpose, for the reason why: the request is not held to the
// document, its answer is, and it must be a 4xx refusal. A request so
// marked that the document admits is reported.
func OffContract(ctx context.Context, why string) context.Context {
	if why == "" {
		why = "unspecified"
	}
	return context.WithValue(ctx, offContractKey{}, why)
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	report := t.Report
	if r, ok := ctx.Value(reporterKey{}).(Reporter); ok {
		report = r
	}
	offContract, _ := ctx.Value(offContractKey{}).(string)

	// The body is read once and given to the check and to the wire each
	// a reader of its own; the length stays as the client set it (a reader
	// of unknown length still goes chunked).
	var reqBody []byte
	sent := req
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("contract: read request body: %w", err)
		}
		reqBody = b
		sent = req.Clone(ctx)
		sent.Body = io.NopCloser(bytes.NewReader(b))
		sent.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	next := t.Next
	if next == nil {
		next = http.DefaultTransport
	}
	res, err := next.RoundTrip(sent)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("contract: read response body: %w", err)
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	if t.Skip != nil && t.Skip(req, res) {
		return res, nil
	}

	checked := req.Clone(ctx)
	checked.Body = io.NopCloser(bytes.NewReader(reqBody))
	ex := exchange{req: checked, status: res.StatusCode, header: res.Header, body: body}
	if err := t.Spec.check(ctx, ex, offContract); err != nil {
		msg := fmt.Sprintf("openapi contract: %s %s → %d: %v", req.Method, req.URL.RequestURI(), res.StatusCode, err)
		if report == nil {
			// Nobody to tell: the mismatch becomes the request's error
			// rather than go unheard.
			return nil, errors.New(msg)
		}
		report.Errorf("%s", msg)
	}
	return res, nil
}
