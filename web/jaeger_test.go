//go:build browser

package web_test

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// jaeger stands in for the observability profile's Jaeger: it takes the
// replicas' spans over OTLP/HTTP (POST /v1/traces, protobuf), as Jaeger's
// collector does, and answers the part of Jaeger's query API that the
// trace page reads (/api/traces/{id}, /api/traces?service=, /api/services)
// in Jaeger's JSON.
type jaeger struct {
	url  string
	down atomic.Bool // the query API answers as if Jaeger were not running

	mu    sync.Mutex
	spans []jaegerSpan
}

type jaegerSpan struct {
	service string
	span    *tracepb.Span
}

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	j := &jaeger{}
	srv := httptest.NewServer(http.HandlerFunc(j.collect))
	t.Cleanup(srv.Close)
	j.url = srv.URL
	return j
}

func (j *jaeger) collect(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	j.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				j.spans = append(j.spans, jaegerSpan{service: service, span: sp})
			}
		}
	}
	j.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// query serves Jaeger's query API at path (without the /jaeger the
// balancer strips), as nginx passes it on.
func (j *jaeger) query(w http.ResponseWriter, r *http.Request, path string) {
	if j.down.Load() {
		// What nginx answers when it cannot reach Jaeger.
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, `{"status":502,"code":"unavailable"}`)
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case path == "/api/services":
		var names []string
		for _, s := range j.spans {
			if !slices.Contains(names, s.service) {
				names = append(names, s.service)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": names})
	case path == "/api/traces":
		service := r.URL.Query().Get("service")
		var ids []string
		for _, s := range j.spans {
			id := hex.EncodeToString(s.span.GetTraceId())
			if s.service == service && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		traces := []any{}
		for _, id := range ids {
			traces = append(traces, j.traceLocked(id))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": traces})
	case strings.HasPrefix(path, "/api/traces/"):
		t := j.traceLocked(strings.TrimPrefix(path, "/api/traces/"))
		if t == nil {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"data": nil, "errors": []any{map[string]any{"code": 404, "msg": "trace not found"}}})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": []any{t}})
	default:
		http.NotFound(w, r)
	}
}

// spanCount is how many spans of trace id the replicas sent.
func (j *jaeger) spanCount(id string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, s := range j.spans {
		if hex.EncodeToString(s.span.GetTraceId()) == id {
			n++
		}
	}
	return n
}

// spanNamed is how many spans named name the replicas sent.
func (j *jaeger) spanNamed(name string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, s := range j.spans {
		if s.span.GetName() == name {
			n++
		}
	}
	return n
}

// traceLocked is trace id in Jaeger's JSON (model/json), or nil.
func (j *jaeger) traceLocked(id string) map[string]any {
	processes := map[string]any{}
	pid := map[string]string{}
	var spans []any
	for _, s := range j.spans {
		sp := s.span
		if hex.EncodeToString(sp.GetTraceId()) != id {
			continue
		}
		if _, ok := pid[s.service]; !ok {
			pid[s.service] = "p" + string(rune('1'+len(pid)))
			processes[pid[s.service]] = map[string]any{"serviceName": s.service, "tags": []any{}}
		}
		refs := []any{}
		if len(sp.GetParentSpanId()) > 0 {
			refs = append(refs, map[string]any{"refType": "CHILD_OF", "traceID": id, "spanID": hex.EncodeToString(sp.GetParentSpanId())})
		}
		tags := jaegerTags(sp.GetAttributes())
		if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			tags = append(tags, map[string]any{"key": "error", "type": "bool", "value": true},
				map[string]any{"key": "otel.status_code", "type": "string", "value": "ERROR"})
		}
		logs := []any{}
		for _, ev := range sp.GetEvents() {
			fields := append([]any{map[string]any{"key": "event", "type": "string", "value": ev.GetName()}}, jaegerTags(ev.GetAttributes())...)
			logs = append(logs, map[string]any{"timestamp": ev.GetTimeUnixNano() / 1000, "fields": fields})
		}
		spans = append(spans, map[string]any{
			"traceID": id, "spanID": hex.EncodeToString(sp.GetSpanId()), "operationName": sp.GetName(),
			"references": refs, "startTime": sp.GetStartTimeUnixNano() / 1000,
			"duration": (sp.GetEndTimeUnixNano() - sp.GetStartTimeUnixNano()) / 1000,
			"tags":     tags, "logs": logs, "processID": pid[s.service],
		})
	}
	if spans == nil {
		return nil
	}
	return map[string]any{"traceID": id, "spans": spans, "processes": processes}
}

func jaegerTags(kvs []*commonpb.KeyValue) []any {
	out := []any{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_BoolValue:
			out = append(out, map[string]any{"key": kv.GetKey(), "type": "bool", "value": v.GetBoolValue()})
		case *commonpb.AnyValue_IntValue:
			out = append(out, map[string]any{"key": kv.GetKey(), "type": "int64", "value": v.GetIntValue()})
		case *commonpb.AnyValue_DoubleValue:
			out = append(out, map[string]any{"key": kv.GetKey(), "type": "float64", "value": v.GetDoubleValue()})
		default:
			out = append(out, map[string]any{"key": kv.GetKey(), "type": "string", "value": v.GetStringValue()})
		}
	}
	return out
}

// front is the compose stack's nginx as far as the pages see it: Jaeger's
// query API under /jaeger/api/ (deploy/nginx.conf), everything else to
// the stack's balancer.
func front(t *testing.T, stackURL string, j *jaeger) string {
	t.Helper()
	u, err := url.Parse(stackURL)
	if err != nil {
		t.Fatal(err)
	}
	rest := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := strings.CutPrefix(r.URL.Path, "/jaeger/api/"); ok && r.Method == http.MethodGet {
			j.query(w, r, "/api/"+p)
			return
		}
		rest.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
