package deploy_test

// deploy/k8s renders with kubectl kustomize (base, overlays/example and
// overlays/cloudnative-pg), every object decodes strictly
// (k8s_objects_test.go), and the rendering keeps what the service needs from it (checkK8s): probes on the routes
// the API registers and on its API port, container ports where the
// configuration puts them, at least three API replicas, no `latest` or
// untagged image, three separate Redis StatefulSets named by
// SHOP_REDIS_ADDRS, a grace period that outlasts the drain, an autoscaler
// that stays inside PostgreSQL's connection budget, metrics apart from the
// API; and, where the rendering runs PostgreSQL as a CloudNativePG
// Cluster, what k8s_cnpg_test.go checks of it. TestK8s_ChecksCatchMistakes
// breaks each of these on purpose and requires checkK8s to say so.
//
// kubectl (on this kind of machine; kustomize is built into it) is needed;
// without it the tests are skipped, except in CI (CI=true).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// k8sDirs are the kustomizations CI renders.
var k8sDirs = []string{"k8s/base", "k8s/overlays/example", "k8s/overlays/cloudnative-pg"}

// Paths the probes must use (the contract; the API must register them).
const (
	readinessPath = "/readyz"
	livenessPath  = "/healthz"
	// drainMargin is what the grace period must leave after the preStop
	// sleep and SHOP_SHUTDOWN_DRAIN: the idempotency keys still being
	// finished in the background, then the pools closing.
	drainMargin = idempotency.FinishRetryTimeout
	// minPreStop is the least preStop sleep: the time the endpoints
	// controller and the proxies take to drop a terminating pod.
	minPreStop = 3
	// connReserve is what PostgreSQL keeps besides the API pods: the
	// migration Job, an operator's session, superuser_reserved_connections.
	connReserve = 10
)

// render runs kubectl kustomize on dir.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	bin := needTool(t, "kubectl", "kubectl kustomize renders deploy/k8s")
	out, err := exec.Command(bin, "kustomize", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	return out
}

func mustDecode(t *testing.T, rendered []byte) objects {
	t.Helper()
	objs, err := decodeObjects(rendered)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestK8s_Render(t *testing.T) {
	routes := apiRoutes(t)
	for _, dir := range k8sDirs {
		t.Run(dir, func(t *testing.T) {
			objs := mustDecode(t, render(t, dir))
			t.Logf("%d Deployments, %d StatefulSets, %d Jobs, %d Services, %d NetworkPolicies, %d Secrets",
				len(objs.deployments), len(objs.statefulSets), len(objs.jobs), len(objs.services), len(objs.netpols), len(objs.secrets))
			overlay := strings.Contains(dir, "overlays")
			for _, p := range checkK8s(objs, routes, overlay) {
				t.Error(p)
			}
		})
	}
}

// mistake is a change to a rendering that checkK8s must report.
type mistake struct {
	name    string
	want    string // in one of the problems found
	mistake func(o *objects)
}

// Each mistake below, made in the rendered example overlay, must be found;
// and each of cnpgMistakes (k8s_cnpg_test.go) in the CloudNativePG one.
func TestK8s_ChecksCatchMistakes(t *testing.T) {
	routes := apiRoutes(t)
	t.Run("example", func(t *testing.T) { catches(t, "k8s/overlays/example", routes, exampleMistakes) })
	t.Run("cloudnative-pg", func(t *testing.T) { catches(t, "k8s/overlays/cloudnative-pg", routes, cnpgMistakes) })
}

// catches renders dir, requires checkK8s to find nothing wrong with it,
// then makes each mistake in a fresh decoding and requires it found.
func catches(t *testing.T, dir string, routes []string, mistakes []mistake) {
	rendered := render(t, dir)
	if p := checkK8s(mustDecode(t, rendered), routes, true); len(p) > 0 {
		t.Fatalf("%s is wrong before any mistake: %q", dir, p)
	}
	for _, m := range mistakes {
		t.Run(m.name, func(t *testing.T) {
			objs := mustDecode(t, rendered)
			m.mistake(&objs)
			problems := checkK8s(objs, routes, true)
			for _, p := range problems {
				if strings.Contains(p, m.want) {
					return
				}
			}
			t.Errorf("no problem mentions %q; found: %q", m.want, problems)
		})
	}
}

var exampleMistakes = []mistake{
	{"two replicas", "replicas", func(o *objects) { o.deployments[0].Spec.Replicas = 2 }},
	{"autoscaler down to two", "minReplicas", func(o *objects) { o.hpas[0].Spec.MinReplicas = 2 }},
	{"autoscaler past the connection budget", "max_connections", func(o *objects) { o.hpas[0].Spec.MaxReplicas = 20 }},
	{"readiness on /healthz", "readiness probe on /healthz, want /readyz", func(o *objects) { api(o).ReadinessProbe.HTTPGet.Path = "/healthz" }},
	{"liveness on a route that does not exist", "liveness probe on /health,", func(o *objects) { api(o).LivenessProbe.HTTPGet.Path = "/health" }},
	{"readiness on the metrics port", "readiness probe on port metrics", func(o *objects) { api(o).ReadinessProbe.HTTPGet.Port = intOrString{Str: "metrics"} }},
	{"API port not the configured one", "port http is 8000", func(o *objects) { api(o).Ports[0].ContainerPort = 8000 }},
	{"metrics port not the configured one", "port metrics is 9100", func(o *objects) { api(o).Ports[1].ContainerPort = 9100 }},
	{"a latest tag", "latest", func(o *objects) { o.statefulSets[1].Spec.Template.Spec.Containers[0].Image = "redis:latest" }},
	{"an untagged image", "tag", func(o *objects) { o.jobs[0].Spec.Template.Spec.Containers[0].Image = "registry.example.com/shop" }},
	{"two Redis nodes", "SHOP_REDIS_ADDRS names 2 nodes", func(o *objects) { setEnv(api(o), "SHOP_REDIS_ADDRS", "redis-1:6379,redis-2:6379") }},
	{"one Redis node named twice", "are the same StatefulSet", func(o *objects) { setEnv(api(o), "SHOP_REDIS_ADDRS", "redis-1:6379,redis-2:6379,redis-2:6379") }},
	{"a Redis node that is no Service", "redis-9 is no Service", func(o *objects) { setEnv(api(o), "SHOP_REDIS_ADDRS", "redis-1:6379,redis-2:6379,redis-9:6379") }},
	{"Redis as one StatefulSet of three", "3 replicas; a quorum node is one Redis", func(o *objects) {
		for i := range o.statefulSets {
			if o.statefulSets[i].Metadata.Name == "redis-2" {
				o.statefulSets[i].Spec.Replicas = 3
			}
		}
	}},
	{"a grace period shorter than the drain", "terminationGracePeriodSeconds", func(o *objects) {
		g := 15
		o.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds = &g
	}},
	{"a drain longer than the grace period", "terminationGracePeriodSeconds", func(o *objects) { setEnv(api(o), "SHOP_SHUTDOWN_DRAIN", "30s") }},
	{"metrics on the API Service", "API port only, not metrics", func(o *objects) {
		for i := range o.services {
			if o.services[i].Metadata.Name == "shop-api" {
				o.services[i].Spec.Ports[0].TargetPort = intOrString{Str: "metrics"}
			}
		}
	}},
	{"metrics open to everyone", "metrics port is open to everyone", func(o *objects) {
		for i := range o.netpols {
			if o.netpols[i].Metadata.Name == "shop-api" {
				o.netpols[i].Spec.Ingress[1].From = nil
			}
		}
	}},
	{"a PodDisruptionBudget that selects nothing", "no PodDisruptionBudget", func(o *objects) {
		o.pdbs[0].Spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": "shop"}
	}},
	{"no memory limit", "resources", func(o *objects) { delete(api(o).Resources.Limits, "memory") }},
	{"a Secret that is not rendered", "Secret", func(o *objects) { o.secrets = nil }},
	{"a configuration the service refuses", "refuses this configuration", func(o *objects) { setEnv(api(o), "SHOP_LOCK_MODE", "sometimes") }},
	{"a key scheme the service refuses", "refuses this configuration", func(o *objects) { setEnv(api(o), "SHOP_KEY_SCHEME", "3") }},
	{"a rollout that stops a replica first", "maxUnavailable", func(o *objects) {
		o.deployments[0].Spec.Strategy.RollingUpdate.MaxUnavailable = intOrString{Int: 1}
	}},
	{"a rollout that replaces everything at once", "maxSurge", func(o *objects) {
		o.deployments[0].Spec.Strategy.RollingUpdate.MaxSurge = intOrString{Str: "100%"}
	}},
	{"a rollout that recreates", "strategy Recreate", func(o *objects) { o.deployments[0].Spec.Strategy.Type = "Recreate" }},
	{"no preStop sleep", "preStop sleep 0s", func(o *objects) { api(o).Lifecycle = nil }},
	{"pods that migrate at start", "SHOP_MIGRATE", func(o *objects) { setEnv(api(o), "SHOP_MIGRATE", "true") }},
}

// The decoding is strict: a misspelt field, a kind the tests do not know
// and a wrong API version are errors, where kubectl kustomize renders them.
func TestK8s_StrictDecoding(t *testing.T) {
	rendered := map[string]string{}
	for _, m := range []struct{ dir, name, old, new, want string }{
		{"example", "a misspelt field", "readinessProbe:", "readinesProbe:", "field readinesProbe not found"},
		{"example", "an unknown kind", "kind: PodDisruptionBudget", "kind: PodDisruptionBudgets", "a kind this test does not know"},
		{"example", "an old API version", "apiVersion: autoscaling/v2", "apiVersion: autoscaling/v1", `want "autoscaling/v2"`},
		{"cloudnative-pg", "a misspelt field of the Cluster", "dataDurability:", "dataDurabilty:", "field dataDurabilty not found"},
		{"cloudnative-pg", "another API of the Cluster", "apiVersion: postgresql.cnpg.io/v1", "apiVersion: postgresql.cnpg.io/v2", `want "postgresql.cnpg.io/v1"`},
	} {
		if _, ok := rendered[m.dir]; !ok {
			rendered[m.dir] = string(render(t, "k8s/overlays/"+m.dir))
		}
		rendered := rendered[m.dir]
		t.Run(m.name, func(t *testing.T) {
			if !strings.Contains(rendered, m.old) {
				t.Fatalf("the rendering has no %q", m.old)
			}
			_, err := decodeObjects([]byte(strings.Replace(rendered, m.old, m.new, 1)))
			if err == nil || !strings.Contains(err.Error(), m.want) {
				t.Errorf("decoding with %s: %v, want an error with %q", m.name, err, m.want)
			}
		})
	}
}

// checkK8s returns what is wrong with a rendering. overlay says it is a
// whole deployment (a base has no Secret yet).
func checkK8s(o objects, routes []string, overlay bool) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// Every image: a registry's tag, never latest, never none.
	each := func(fn func(where string, c *container)) {
		for i := range o.deployments {
			for j := range o.deployments[i].Spec.Template.Spec.Containers {
				fn("Deployment "+o.deployments[i].Metadata.Name, &o.deployments[i].Spec.Template.Spec.Containers[j])
			}
		}
		for i := range o.statefulSets {
			for j := range o.statefulSets[i].Spec.Template.Spec.Containers {
				fn("StatefulSet "+o.statefulSets[i].Metadata.Name, &o.statefulSets[i].Spec.Template.Spec.Containers[j])
			}
		}
		for i := range o.jobs {
			for j := range o.jobs[i].Spec.Template.Spec.Containers {
				fn("Job "+o.jobs[i].Metadata.Name, &o.jobs[i].Spec.Template.Spec.Containers[j])
			}
		}
	}
	each(func(where string, c *container) {
		name, tag := splitImage(c.Image)
		switch {
		case tag == "":
			bad("%s: image %q has no tag (it would be latest)", where, c.Image)
		case tag == "latest":
			bad("%s: image %q is latest", where, c.Image)
		case name == "":
			bad("%s: image %q has no name", where, c.Image)
		}
		if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
			bad("%s: container %s needs resources: cpu and memory requests, a memory limit", where, c.Name)
		}
		if overlay {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if data := secretData(o, ref.Name); data == nil {
					bad("%s: %s names Secret %s, which the overlay does not render and no operator of it writes", where, e.Name, ref.Name)
				} else if _, ok := data[ref.Key]; !ok {
					bad("%s: %s names key %s, which Secret %s lacks", where, e.Name, ref.Key, ref.Name)
				}
			}
		}
		_, unexpanded := containerEnv(o, c)
		for _, u := range unexpanded {
			bad("%s: %s", where, u)
		}
	})

	// The API.
	var d *deployment
	for i := range o.deployments {
		if o.deployments[i].Metadata.Name == "shop-api" {
			d = &o.deployments[i]
		}
	}
	if d == nil {
		return append(problems, "no Deployment shop-api")
	}
	if d.Spec.Replicas < 3 {
		bad("Deployment shop-api: %d replicas, want at least 3", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	c := &pod.Containers[0]
	env, _ := containerEnv(o, c)
	cfg, err := config.FromEnv(func(name string) string { return env[name] })
	if err != nil {
		bad("Deployment shop-api: the service refuses this configuration: %v", err)
		return problems
	}
	httpPort, metricsPort := addrPort(cfg.HTTPAddr), addrPort(cfg.MetricsAddr)
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != httpPort {
		bad("container api: port http is %d, SHOP_HTTP_ADDR %q", ports["http"], cfg.HTTPAddr)
	}
	if ports["metrics"] != metricsPort {
		bad("container api: port metrics is %d, SHOP_METRICS_ADDR %q", ports["metrics"], cfg.MetricsAddr)
	}
	port := func(p intOrString) int {
		if p.Str != "" {
			return ports[p.Str]
		}
		return p.Int
	}
	for _, pr := range []struct {
		name, path string
		probe      *probe
	}{{"readiness", readinessPath, c.ReadinessProbe}, {"liveness", livenessPath, c.LivenessProbe}} {
		switch {
		case pr.probe == nil || pr.probe.HTTPGet == nil:
			bad("container api: no HTTP %s probe", pr.name)
		case pr.probe.HTTPGet.Path != pr.path:
			bad("container api: %s probe on %s, want %s", pr.name, pr.probe.HTTPGet.Path, pr.path)
		case !slices.Contains(routes, pr.probe.HTTPGet.Path):
			bad("container api: %s probe on %s, a route the API does not register", pr.name, pr.probe.HTTPGet.Path)
		case port(pr.probe.HTTPGet.Port) != httpPort:
			bad("container api: %s probe on port %s, not the API's %d", pr.name, pr.probe.HTTPGet.Port, httpPort)
		}
	}

	// Graceful termination: the preStop sleep, the drain and the late
	// idempotency tries fit in the grace period.
	sleep := 0
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		sleep = c.Lifecycle.PreStop.Sleep.Seconds
	}
	grace := 30 // Kubernetes' default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	if need := time.Duration(sleep)*time.Second + cfg.ShutdownDrain + drainMargin; time.Duration(grace)*time.Second < need {
		bad("Deployment shop-api: terminationGracePeriodSeconds %d, want at least %s (preStop %ds + SHOP_SHUTDOWN_DRAIN %s + %s)",
			grace, need, sleep, cfg.ShutdownDrain, drainMargin)
	}

	// The rollout (DESIGN.md §8): one new pod at a time beside the old
	// ones, none of them taken away before its successor is ready, so old
	// and new versions serve side by side for as short a time as a pod's
	// start; the preStop sleep lets the endpoints drop the pod before it
	// stops accepting; and the pods do not migrate at start, which an old
	// release's pod restarted during the rollout could not do on the new
	// schema (the migrations are the Job's).
	rollout := d.Spec.Strategy
	switch {
	case rollout.Type != "" && rollout.Type != "RollingUpdate":
		bad("Deployment shop-api: strategy %s, want RollingUpdate", rollout.Type)
	case rollout.RollingUpdate.MaxUnavailable.Int != 0 || rollout.RollingUpdate.MaxUnavailable.Str != "":
		bad("Deployment shop-api: maxUnavailable %v, want 0: a replica is stopped only once its successor is ready", rollout.RollingUpdate.MaxUnavailable)
	case rollout.RollingUpdate.MaxSurge.Int != 1:
		bad("Deployment shop-api: maxSurge %v, want 1: one new replica at a time beside the old ones", rollout.RollingUpdate.MaxSurge)
	}
	if sleep < minPreStop {
		bad("container api: preStop sleep %ds, want at least %ds for the endpoints to drop the pod before it stops accepting", sleep, minPreStop)
	}
	if cfg.Migrate {
		bad("container api: SHOP_MIGRATE=true; the migrations are the Job's, and an old release's pod restarted mid-rollout cannot migrate the new schema")
	}

	// The lock quorum: SHOP_REDIS_ADDRS names three Services, each of one
	// StatefulSet of its own with one replica.
	if len(cfg.RedisAddrs) != 3 {
		bad("SHOP_REDIS_ADDRS names %d nodes, want the three of the quorum", len(cfg.RedisAddrs))
	}
	seen := map[string]string{}
	for _, addr := range cfg.RedisAddrs {
		host, p, _ := net.SplitHostPort(addr)
		svc := findService(o, host)
		if svc == nil {
			bad("SHOP_REDIS_ADDRS: %s is no Service", host)
			continue
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(sp servicePort) bool { return strconv.Itoa(sp.Port) == p }) {
			bad("SHOP_REDIS_ADDRS: Service %s has no port %s", host, p)
		}
		var sets []string
		for _, s := range o.statefulSets {
			if selects(svc.Spec.Selector, s.Spec.Template.Metadata.Labels) {
				sets = append(sets, s.Metadata.Name)
				if s.Spec.Replicas != 1 {
					bad("StatefulSet %s (%s): %d replicas; a quorum node is one Redis", s.Metadata.Name, host, s.Spec.Replicas)
				}
			}
		}
		if len(sets) != 1 {
			bad("SHOP_REDIS_ADDRS: Service %s selects the pods of %d StatefulSets %v, want one", host, len(sets), sets)
			continue
		}
		if other, dup := seen[sets[0]]; dup {
			bad("SHOP_REDIS_ADDRS: %s and %s are the same StatefulSet %s", other, host, sets[0])
		}
		seen[sets[0]] = host
	}

	// Autoscaling: never below three, never past the connection budget.
	var hpa *horizontalPodAutoscaler
	for i := range o.hpas {
		if o.hpas[i].Spec.ScaleTargetRef.Kind == "Deployment" && o.hpas[i].Spec.ScaleTargetRef.Name == "shop-api" {
			hpa = &o.hpas[i]
		}
	}
	if hpa == nil {
		bad("no HorizontalPodAutoscaler of Deployment shop-api")
	} else {
		if hpa.Spec.MinReplicas < 3 {
			bad("HorizontalPodAutoscaler shop-api: minReplicas %d, want at least 3", hpa.Spec.MinReplicas)
		}
		// Each pod: its pool, and half as many (at least 2) for idempotency
		// bookkeeping (internal/app).
		perPod := int(cfg.DBMaxConns) + max(int(cfg.DBMaxConns)/2, 2)
		budget, err := strconv.Atoi(hpa.Metadata.Annotations["shop.example/postgres-max-connections"])
		switch {
		case err != nil:
			bad("HorizontalPodAutoscaler shop-api: annotation shop.example/postgres-max-connections: %v", err)
		case hpa.Spec.MaxReplicas*perPod+connReserve > budget:
			bad("HorizontalPodAutoscaler shop-api: %d replicas × %d connections + %d exceed max_connections %d",
				hpa.Spec.MaxReplicas, perPod, connReserve, budget)
		}
		// Where the rendering runs the database too, the annotation is
		// what it configures, not a figure to trust.
		for _, cl := range o.clusters {
			if mc, err := clusterMaxConnections(cl); err != nil {
				bad("Cluster %s: %v", cl.Metadata.Name, err)
			} else if mc != budget {
				bad("HorizontalPodAutoscaler shop-api: annotation shop.example/postgres-max-connections %q, but Cluster %s has max_connections %d",
					hpa.Metadata.Annotations["shop.example/postgres-max-connections"], cl.Metadata.Name, mc)
			}
		}
	}
	var pdbOK bool
	for _, p := range o.pdbs {
		if selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) && p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.Int == 1 {
			pdbOK = true
		}
	}
	if !pdbOK {
		bad("no PodDisruptionBudget keeps all but one API pod up")
	}

	// Metrics apart: the API Service has only the API port, the metrics
	// port is reachable from the scraper's pods only.
	for _, s := range o.services {
		if !selects(s.Spec.Selector, d.Spec.Template.Metadata.Labels) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			tp := port(sp.TargetPort)
			if s.Metadata.Name == "shop-api" && tp != httpPort {
				bad("Service shop-api: port %s leads to %d; the API Service carries the API port only, not metrics", sp.Name, tp)
			}
		}
	}
	for _, np := range o.netpols {
		if !selects(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Metadata.Labels) {
			continue
		}
		for _, in := range np.Spec.Ingress {
			for _, p := range in.Ports {
				if port(p.Port) == metricsPort && len(in.From) == 0 {
					bad("NetworkPolicy %s: the metrics port is open to everyone", np.Metadata.Name)
				}
			}
		}
	}
	if overlay && len(o.secrets) == 0 {
		bad("the overlay renders no Secret")
	}
	return append(problems, checkCloudNativePG(o)...)
}

// apiRoutes lists the GET routes the API registers, from the service
// itself: built on pools that connect lazily, so no server is needed.
func apiRoutes(t *testing.T) []string {
	t.Helper()
	cfg, err := config.FromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig("postgres://shop@127.0.0.1:1/shop?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	clients := redisx.Clients([]string{"127.0.0.1:1"})
	t.Cleanup(func() { _ = redisx.Close(clients) })
	a, err := app.New(cfg, app.Deps{Pool: pool, Redis: clients})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	var routes []string
	for _, r := range a.Echo.Routes() {
		if r.Method == http.MethodGet {
			routes = append(routes, r.Path)
		}
	}
	// The metrics listener's route, which Prometheus scrapes.
	rec := httptest.NewRecorder()
	a.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics on the metrics handler: %d", rec.Code)
	}
	return routes
}

func api(o *objects) *container { return &o.deployments[0].Spec.Template.Spec.Containers[0] }

func setEnv(c *container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
			return
		}
	}
	c.Env = append(c.Env, c.Env[0]) // a variable of the container's element type
	e := &c.Env[len(c.Env)-1]
	e.Name, e.Value, e.ValueFrom = name, value, nil
}

func addrPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
}

// splitImage splits "registry:5000/name:tag" into name and tag.
func splitImage(image string) (name, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[:i], image[i+1:] // a digest pins as well as a tag
	}
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// selects reports whether a selector's labels are all among labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func findService(o objects, name string) *service {
	for i := range o.services {
		if o.services[i].Metadata.Name == name {
			return &o.services[i]
		}
	}
	return nil
}

// findSecret finds a Secret by the name the manifests use; the generator
// adds a hash suffix, and kustomize rewrites the references to match.
func findSecret(o objects, name string) *secret {
	for i := range o.secrets {
		if o.secrets[i].Metadata.Name == name {
			return &o.secrets[i]
		}
	}
	return nil
}
