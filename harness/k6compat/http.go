package k6compat

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dop251/goja"
)

// expected is what http.expectedStatuses returns: the statuses that do not
// count as failed in http_req_failed.
type expected struct {
	ranges [][2]int
}

func defaultExpected() *expected { return &expected{ranges: [][2]int{{200, 399}}} }

func (e *expected) has(status int) bool {
	for _, r := range e.ranges {
		if status >= r[0] && status <= r[1] {
			return true
		}
	}
	return false
}

// paramKeys are the request params this runner reads.
var paramKeys = map[string]bool{"headers": true, "tags": true, "timeout": true, "responseCallback": true, "responseType": true}

// request is one request, read from JS values in the VU's goroutine, so
// that batch can send several from other goroutines.
type request struct {
	method, url string
	body        []byte
	headers     map[string]string
	tags        map[string]string
	timeout     time.Duration
	expect      *expected
	noBody      bool // responseType "none"
}

// reply is what sending a request got.
type reply struct {
	status     int
	statusText string
	proto      string
	headers    http.Header
	body       []byte
	err        string
	errCode    int
	waiting    time.Duration // until the headers came
	total      time.Duration // until the body was read
	receiving  time.Duration
}

func (v *vu) httpModule() *goja.Object {
	rt := v.rt
	o := rt.NewObject()
	noBody := func(method string) func(goja.FunctionCall) goja.Value {
		return func(c goja.FunctionCall) goja.Value {
			return v.send(v.newRequest(method, c.Argument(0), goja.Undefined(), c.Argument(1)))
		}
	}
	withBody := func(method string) func(goja.FunctionCall) goja.Value {
		return func(c goja.FunctionCall) goja.Value {
			return v.send(v.newRequest(method, c.Argument(0), c.Argument(1), c.Argument(2)))
		}
	}
	_ = o.Set("get", noBody("GET"))
	_ = o.Set("head", noBody("HEAD"))
	for name, method := range map[string]string{"post": "POST", "put": "PUT", "patch": "PATCH", "del": "DELETE", "options": "OPTIONS"} {
		_ = o.Set(name, withBody(method))
	}
	_ = o.Set("request", func(c goja.FunctionCall) goja.Value {
		return v.send(v.newRequest(strings.ToUpper(c.Argument(0).String()), c.Argument(1), c.Argument(2), c.Argument(3)))
	})
	_ = o.Set("batch", v.batch)
	_ = o.Set("expectedStatuses", func(c goja.FunctionCall) goja.Value {
		e := &expected{}
		for _, a := range c.Arguments {
			switch x := a.Export().(type) {
			case int64:
				e.ranges = append(e.ranges, [2]int{int(x), int(x)})
			case map[string]any:
				e.ranges = append(e.ranges, [2]int{intOr(x["min"], 0), intOr(x["max"], 0)})
			default:
				panic(rt.NewTypeError("expectedStatuses: %v is neither a status nor {min, max}", a))
			}
		}
		return rt.ToValue(e)
	})
	_ = o.Set("setResponseCallback", func(c goja.FunctionCall) goja.Value {
		v.expect = v.callback(c.Argument(0))
		return goja.Undefined()
	})
	return o
}

// callback reads a responseCallback: null turns http_req_failed off.
func (v *vu) callback(val goja.Value) *expected {
	if goja.IsNull(val) {
		return nil
	}
	if e, ok := val.Export().(*expected); ok {
		return e
	}
	panic(v.rt.NewTypeError("responseCallback: only http.expectedStatuses(...) or null is supported by the k6 compatibility runner"))
}

func (v *vu) newRequest(method string, urlV, bodyV, paramsV goja.Value) request {
	rt := v.rt
	if v.inInit {
		panic(rt.NewTypeError("http.%s: requests are not allowed in the init code (k6 forbids them too)", strings.ToLower(method)))
	}
	if goja.IsUndefined(urlV) || goja.IsNull(urlV) {
		panic(rt.NewTypeError("http %s: no URL", method))
	}
	req := request{method: method, url: urlV.String(), headers: map[string]string{}, tags: map[string]string{},
		timeout: 60 * time.Second, expect: v.expect}
	switch b := bodyV.Export().(type) {
	case nil:
	case string:
		req.body = []byte(b)
	case map[string]any:
		form := url.Values{}
		for k, x := range b {
			form.Set(k, stringOf(x))
		}
		req.body = []byte(form.Encode())
		req.headers["Content-Type"] = "application/x-www-form-urlencoded"
	case goja.ArrayBuffer:
		req.body = b.Bytes()
	default:
		panic(rt.NewTypeError("http %s %s: a body must be a string or an object (form fields)", method, req.url))
	}
	if goja.IsUndefined(paramsV) || goja.IsNull(paramsV) {
		return req
	}
	params := paramsV.ToObject(rt)
	for _, k := range params.Keys() {
		if !paramKeys[k] {
			panic(v.unsupported("http params.%s is not supported by the k6 compatibility runner (it reads headers, tags, timeout, responseCallback, responseType)", k))
		}
	}
	if h := params.Get("headers"); h != nil && !goja.IsUndefined(h) {
		hm, err := stringMap(h.Export(), "params.headers")
		if err != nil {
			panic(rt.NewTypeError(err.Error()))
		}
		maps.Copy(req.headers, hm)
	}
	if t := params.Get("tags"); t != nil && !goja.IsUndefined(t) {
		tm, err := stringMap(t.Export(), "params.tags")
		if err != nil {
			panic(rt.NewTypeError(err.Error()))
		}
		req.tags = tm
	}
	if t := params.Get("timeout"); t != nil && !goja.IsUndefined(t) {
		d, err := duration(t.Export(), "params.timeout")
		if err != nil {
			panic(rt.NewTypeError(err.Error()))
		}
		req.timeout = d
	}
	if cb := params.Get("responseCallback"); cb != nil && !goja.IsUndefined(cb) {
		req.expect = v.callback(cb)
	}
	if rtype := params.Get("responseType"); rtype != nil && !goja.IsUndefined(rtype) {
		switch rtype.String() {
		case "text":
		case "none":
			req.noBody = true
		default:
			panic(v.unsupported("params.responseType %q is not supported by the k6 compatibility runner (text, none)", rtype.String()))
		}
	}
	return req
}

// send sends one request and returns its Response object.
func (v *vu) send(req request) goja.Value {
	return v.response(req, v.run.do(v.ctx, req))
}

// batch sends requests in parallel: [method, url, body, params] arrays,
// {method, url, body, params} objects or URL strings (GET).
func (v *vu) batch(call goja.FunctionCall) goja.Value {
	rt := v.rt
	arg := call.Argument(0)
	list, ok := arg.Export().([]any)
	if !ok {
		panic(rt.NewTypeError("http.batch: only an array of requests is supported by the k6 compatibility runner"))
	}
	arr := arg.ToObject(rt)
	reqs := make([]request, len(list))
	for i := range list {
		item := arr.Get(strconv.Itoa(i))
		switch x := item.Export().(type) {
		case string:
			reqs[i] = v.newRequest("GET", item, goja.Undefined(), goja.Undefined())
		case []any:
			o := item.ToObject(rt)
			reqs[i] = v.newRequest(strings.ToUpper(o.Get("0").String()), o.Get("1"), orUndefined(o.Get("2")), orUndefined(o.Get("3")))
		case map[string]any:
			o := item.ToObject(rt)
			method := "GET"
			if m, ok := x["method"].(string); ok {
				method = strings.ToUpper(m)
			}
			reqs[i] = v.newRequest(method, o.Get("url"), orUndefined(o.Get("body")), orUndefined(o.Get("params")))
		default:
			panic(rt.NewTypeError("http.batch: request %d is not a URL, an array or an object", i))
		}
	}
	replies := make([]reply, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { replies[i] = v.run.do(v.ctx, reqs[i]) })
	}
	wg.Wait()
	out := make([]any, len(reqs))
	for i := range reqs {
		out[i] = v.response(reqs[i], replies[i])
	}
	return rt.NewArray(out...)
}

func orUndefined(v goja.Value) goja.Value {
	if v == nil {
		return goja.Undefined()
	}
	return v
}

// do sends req with the run's client. A transport failure is a reply with
// status 0 and error/error_code set, as k6 does without throw.
func (r *runner) do(ctx context.Context, req request) reply {
	ctx, cancel := context.WithTimeout(ctx, req.timeout)
	defer cancel()
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, req.url, body)
	if err != nil {
		return reply{err: err.Error(), errCode: 1000}
	}
	hreq.Header.Set("User-Agent", "shop-k6compat")
	for k, val := range req.headers {
		hreq.Header.Set(k, val)
	}
	start := time.Now()
	res, err := r.client.Do(hreq)
	if err != nil {
		return transportFailure(err, time.Since(start))
	}
	defer res.Body.Close()
	waiting := time.Since(start)
	b, err := io.ReadAll(res.Body)
	total := time.Since(start)
	rep := reply{status: res.StatusCode, statusText: res.Status, proto: res.Proto, headers: res.Header,
		body: b, waiting: waiting, total: total, receiving: total - waiting}
	if err != nil {
		f := transportFailure(err, total)
		rep.err, rep.errCode = f.err, f.errCode
	}
	return rep
}

func transportFailure(err error, took time.Duration) reply {
	code := 1000
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = 1050
	case errors.Is(err, syscall.ECONNREFUSED):
		code = 1212
	case errors.Is(err, syscall.ECONNRESET):
		code = 1220
	}
	return reply{err: err.Error(), errCode: code, total: took}
}

// response records the request's metrics and builds its Response object.
func (v *vu) response(req request, rep reply) goja.Value {
	rt := v.rt
	name := req.url
	if n, ok := req.tags["name"]; ok {
		name = n
	}
	tags := v.sampleTags(req.tags)
	tags["method"], tags["url"], tags["name"], tags["status"] = req.method, req.url, name, strconv.Itoa(rep.status)
	if req.expect != nil {
		tags["expected_response"] = strconv.FormatBool(req.expect.has(rep.status))
	}
	reg := v.run.reg
	v.run.live.requests.Add(1)
	reg.add("http_reqs", 1, tags)
	reg.add("http_req_duration", ms(rep.total), tags)
	reg.add("http_req_waiting", ms(rep.waiting), tags)
	if req.expect != nil {
		reg.add("http_req_failed", boolFloat(!req.expect.has(rep.status)), tags)
	}

	o := rt.NewObject()
	_ = o.Set("status", rep.status)
	_ = o.Set("status_text", rep.statusText)
	_ = o.Set("proto", rep.proto)
	_ = o.Set("url", req.url)
	_ = o.Set("error", rep.err)
	_ = o.Set("error_code", rep.errCode)
	if req.noBody {
		_ = o.Set("body", goja.Null())
	} else {
		_ = o.Set("body", string(rep.body))
	}
	headers := rt.NewObject()
	keys := make([]string, 0, len(rep.headers))
	for k := range rep.headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		_ = headers.Set(http.CanonicalHeaderKey(k), strings.Join(rep.headers[k], ", "))
	}
	_ = o.Set("headers", headers)
	_ = o.Set("cookies", rt.NewObject())
	timings := rt.NewObject()
	// Sending, blocked, connecting and TLS are not measured apart: 0.
	for k, d := range map[string]time.Duration{"duration": rep.total, "waiting": rep.waiting, "receiving": rep.receiving,
		"sending": 0, "blocked": 0, "connecting": 0, "tls_handshaking": 0} {
		_ = timings.Set(k, ms(d))
	}
	_ = o.Set("timings", timings)
	request := rt.NewObject()
	_ = request.Set("method", req.method)
	_ = request.Set("url", req.url)
	_ = request.Set("body", string(req.body))
	reqHeaders := rt.NewObject()
	for k, val := range req.headers {
		_ = reqHeaders.Set(http.CanonicalHeaderKey(k), []any{val})
	}
	_ = request.Set("headers", reqHeaders)
	_ = o.Set("request", request)

	var parsed goja.Value
	_ = o.Set("json", func(c goja.FunctionCall) goja.Value {
		if parsed == nil {
			p, err := v.parse(goja.Undefined(), rt.ToValue(string(rep.body)))
			if err != nil {
				panic(err)
			}
			parsed = p
		}
		sel := c.Argument(0)
		if goja.IsUndefined(sel) {
			return parsed
		}
		return selectPath(rt, parsed, sel.String())
	})
	return v.guard("Response", o)
}

// selectPath follows a dotted path ("items.0.id") of the json() selector;
// other GJSON syntax is outside the subset.
func selectPath(rt *goja.Runtime, val goja.Value, path string) goja.Value {
	if strings.ContainsAny(path, "#*?|@\\") {
		panic(rt.NewTypeError("json(%q): only dotted paths are supported by the k6 compatibility runner", path))
	}
	for _, part := range strings.Split(path, ".") {
		obj, ok := val.(*goja.Object)
		if !ok {
			return goja.Undefined()
		}
		val = obj.Get(part)
		if val == nil {
			return goja.Undefined()
		}
	}
	return val
}

func stringOf(x any) string {
	switch s := x.(type) {
	case string:
		return s
	case nil:
		return ""
	}
	switch n := x.(type) { // the numbers and booleans Export gives
	case int64:
		return strconv.FormatInt(n, 10)
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(n)
	}
	return ""
}
