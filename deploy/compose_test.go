package deploy_test

import (
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.yaml.in/yaml/v3"

	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// TestCompose_StopGracePeriod: `docker compose stop` sends SIGTERM and
// kills after the service's stop_grace_period (10 s unless set). Like a
// pod's grace period, a replica's must outlast the drain and the late
// idempotency tries, or a stop kills requests it could have finished.
func TestCompose_StopGracePeriod(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command         []string          `yaml:"command"`
			StopGracePeriod string            `yaml:"stop_grace_period"`
			Environment     map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	replicas := 0
	for name, s := range doc.Services {
		if !slices.Equal(s.Command, []string{"serve"}) {
			continue
		}
		replicas++
		cfg, err := config.FromEnv(func(k string) string {
			if k == "SHOP_SHUTDOWN_DRAIN" {
				return s.Environment[k]
			}
			return ""
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		grace := 10 * time.Second // compose's default
		if s.StopGracePeriod != "" {
			if grace, err = time.ParseDuration(s.StopGracePeriod); err != nil {
				t.Fatalf("%s: stop_grace_period: %v", name, err)
			}
		}
		if need := cfg.ShutdownDrain + drainMargin; grace < need {
			t.Errorf("%s: stop_grace_period %s, want at least %s (SHOP_SHUTDOWN_DRAIN %s + %s)",
				name, grace, need, cfg.ShutdownDrain, drainMargin)
		}
	}
	if replicas < 2 {
		t.Errorf("%d services run `serve`, want the two replicas", replicas)
	}
}

// The observability profile: Jaeger, the spans sent to it, Prometheus
// keeping the exemplars that name them.

// otlpEndpoint is where make up-observability (deploy/up.sh) points the
// services' spans: the jaeger service's OTLP/HTTP receiver.
const otlpEndpoint = "http://jaeger:4318"

// traced are the services that send spans when SHOP_OTLP_ENDPOINT is set:
// both replicas, the card processor and the mail provider.
var traced = []string{"api-1", "api-2", "gateway", "mailer"}

// composed is the part of a rendered compose file these tests read.
type composed struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Profiles    []string          `yaml:"profiles"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []struct {
			Published string `yaml:"published"`
			Target    string `yaml:"target"`
		} `yaml:"ports"`
	} `yaml:"services"`
}

// composeConfig renders docker-compose.yml as compose sees it with env
// and nothing else: an empty env file instead of the repository's .env,
// and none of the shell's variables. It runs the docker compose plugin if
// there is one, else docker-compose 1.29: the file must work with both.
func composeConfig(t *testing.T, env ...string) composed {
	t.Helper()
	var args []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		args = []string{"docker", "compose"}
	} else {
		args = []string{needTool(t, "docker-compose", "Debian's docker-compose package, or the docker compose plugin")}
	}
	envFile := filepath.Join(t.TempDir(), "empty.env")
	if err := os.WriteFile(envFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--env-file", envFile, "-f", "docker-compose.yml", "config")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = ".."
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s with %q: %v\n%s", strings.Join(args, " "), env, err, stderr)
	}
	var c composed
	if err := yaml.Unmarshal(out, &c); err != nil {
		t.Fatalf("compose config: %v\n%s", err, out)
	}
	return c
}

// exporting is what the service's tracing makes of a service's
// environment: whether it exports spans, and where to.
func exporting(env map[string]string) bool {
	return tracing.Exporting(func(k string) string { return env[k] })
}

// TestCompose_SpansGoToJaegerWhenAsked: with the profile and
// SHOP_OTLP_ENDPOINT (make up-observability), both replicas, the gateway
// and the mailer export their spans to the jaeger service; without the
// endpoint, with the profile or without, none exports anything (an empty
// OTEL_EXPORTER_OTLP_ENDPOINT is tracing off, as the service reads it).
func TestCompose_SpansGoToJaegerWhenAsked(t *testing.T) {
	on := composeConfig(t, "COMPOSE_PROFILES=observability", "SHOP_OTLP_ENDPOINT="+otlpEndpoint)
	if _, ok := on.Services["jaeger"]; !ok {
		t.Fatal("no jaeger service with the observability profile on")
	}
	for _, name := range traced {
		s, ok := on.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		if got := s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; got != otlpEndpoint || !exporting(s.Environment) {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %q (exporting: %v), want %q with SHOP_OTLP_ENDPOINT set",
				name, got, exporting(s.Environment), otlpEndpoint)
		}
	}
	for _, env := range [][]string{{"COMPOSE_PROFILES=observability"}, nil} {
		off := composeConfig(t, env...)
		for name, s := range off.Services {
			if exporting(s.Environment) {
				t.Errorf("%s exports spans with only %q: OTEL_EXPORTER_OTLP_ENDPOINT %q", name, env, s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"])
			}
		}
	}
}

// jaegerConfig is the part of deploy/jaeger/config.yaml these tests read.
type jaegerConfig struct {
	Service struct {
		Extensions []string `yaml:"extensions"`
		Pipelines  map[string]struct {
			Receivers []string `yaml:"receivers"`
			Exporters []string `yaml:"exporters"`
		} `yaml:"pipelines"`
	} `yaml:"service"`
	Extensions struct {
		Storage struct {
			Backends map[string]struct {
				Memory *struct {
					MaxTraces int `yaml:"max_traces"`
				} `yaml:"memory"`
			} `yaml:"backends"`
		} `yaml:"jaeger_storage"`
		Query struct {
			Storage struct {
				Traces string `yaml:"traces"`
			} `yaml:"storage"`
			HTTP struct {
				Endpoint string `yaml:"endpoint"`
			} `yaml:"http"`
			EnableTracing *bool `yaml:"enable_tracing"`
		} `yaml:"jaeger_query"`
	} `yaml:"extensions"`
	Receivers struct {
		OTLP struct {
			Protocols struct {
				HTTP *struct {
					Endpoint string `yaml:"endpoint"`
				} `yaml:"http"`
			} `yaml:"protocols"`
		} `yaml:"otlp"`
	} `yaml:"receivers"`
	Exporters struct {
		Storage struct {
			TraceStorage string `yaml:"trace_storage"`
		} `yaml:"jaeger_storage_exporter"`
	} `yaml:"exporters"`
}

// TestCompose_Jaeger: the jaeger service runs in the observability
// profile only, from JAEGER_IMAGE (the official image of the release
// deploy/images/build.sh builds its stand-in from by default), with
// deploy/jaeger/config.yaml, whose OTLP/HTTP receiver listens where the
// services send their spans (otlpEndpoint) and whose UI is the port
// compose publishes on SHOP_JAEGER_PORT; the spans it takes reach the
// storage the UI reads, and that storage is memory with a bound.
func TestCompose_Jaeger(t *testing.T) {
	jaeger := composeConfig(t, "COMPOSE_PROFILES=observability").Services["jaeger"]
	if !slices.Equal(jaeger.Profiles, []string{"observability"}) {
		t.Errorf("jaeger: profiles %q, want only observability", jaeger.Profiles)
	}
	release := scriptValue(t, "images/build.sh", "jaeger_release")
	if want := "jaegertracing/jaeger:" + release; jaeger.Image != want {
		t.Errorf("jaeger: image %q by default, want %q (the release deploy/images/build.sh builds)", jaeger.Image, want)
	}
	custom := composeConfig(t, "COMPOSE_PROFILES=observability", "JAEGER_IMAGE=shop-local/jaeger:t", "SHOP_JAEGER_PORT=17686").Services["jaeger"]
	if custom.Image != "shop-local/jaeger:t" {
		t.Errorf("jaeger: image %q with JAEGER_IMAGE=shop-local/jaeger:t", custom.Image)
	}
	if len(custom.Ports) != 1 || custom.Ports[0].Published != "17686" {
		t.Errorf("jaeger: ports %+v with SHOP_JAEGER_PORT=17686, want it published there", custom.Ports)
	}

	// The configuration compose mounts is the one the command names.
	raw := rawCompose(t).Services["jaeger"]
	const mounted = "/etc/jaeger/config.yaml"
	if !slices.Contains(raw.Volumes, "./deploy/jaeger/config.yaml:"+mounted+":ro") {
		t.Errorf("jaeger: volumes %q do not mount deploy/jaeger/config.yaml at %s", raw.Volumes, mounted)
	}
	if !slices.Equal(jaeger.Command, []string{"--config", mounted}) {
		t.Errorf("jaeger: command %q, want --config %s", jaeger.Command, mounted)
	}

	var cfg jaegerConfig
	b, err := os.ReadFile("jaeger/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("jaeger/config.yaml: %v", err)
	}
	u, err := url.Parse(otlpEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := composeConfig(t, "COMPOSE_PROFILES=observability").Services[u.Hostname()]; !ok {
		t.Errorf("the spans go to %s, which is no service", u.Host)
	}
	if h := cfg.Receivers.OTLP.Protocols.HTTP; h == nil || !allInterfaces(h.Endpoint, u.Port()) {
		t.Errorf("jaeger/config.yaml: OTLP/HTTP receiver %+v, want it on every interface, port %s (%s)", h, u.Port(), otlpEndpoint)
	}
	if len(jaeger.Ports) != 1 || !allInterfaces(cfg.Extensions.Query.HTTP.Endpoint, jaeger.Ports[0].Target) {
		t.Errorf("jaeger/config.yaml: the UI on %q, compose publishes %+v", cfg.Extensions.Query.HTTP.Endpoint, jaeger.Ports)
	}
	traces := cfg.Service.Pipelines["traces"]
	if !slices.Contains(traces.Receivers, "otlp") || !slices.Contains(traces.Exporters, "jaeger_storage_exporter") {
		t.Errorf("jaeger/config.yaml: traces pipeline %+v, want otlp into jaeger_storage_exporter", traces)
	}
	for _, ext := range []string{"jaeger_storage", "jaeger_query"} {
		if !slices.Contains(cfg.Service.Extensions, ext) {
			t.Errorf("jaeger/config.yaml: extension %s is not enabled", ext)
		}
	}
	store := cfg.Exporters.Storage.TraceStorage
	if cfg.Extensions.Query.Storage.Traces != store {
		t.Errorf("jaeger/config.yaml: the UI reads %q, the spans go to %q", cfg.Extensions.Query.Storage.Traces, store)
	}
	if m := cfg.Extensions.Storage.Backends[store].Memory; m == nil || m.MaxTraces <= 0 {
		t.Errorf("jaeger/config.yaml: storage %q is not memory with max_traces set", store)
	}
	// Left on, the query service sends its own spans to an OTLP/gRPC
	// receiver this configuration does not have, and logs each failure.
	if q := cfg.Extensions.Query.EnableTracing; q == nil || *q {
		t.Error("jaeger/config.yaml: jaeger_query traces itself (enable_tracing is not false)")
	}
}

// allInterfaces reports whether a listener's endpoint is port on every
// interface: a container's localhost is its own.
func allInterfaces(endpoint, port string) bool {
	host, p, err := net.SplitHostPort(endpoint)
	return err == nil && p == port && (host == "" || host == "0.0.0.0")
}

// TestCompose_PrometheusKeepsExemplars: Prometheus keeps exemplars
// (exemplar-storage), and the shop job does not narrow what it asks for to
// a format without them (only OpenMetrics carries exemplars; Prometheus
// asks for it first unless scrape_protocols says otherwise).
func TestCompose_PrometheusKeepsExemplars(t *testing.T) {
	prom := composeConfig(t, "COMPOSE_PROFILES=observability").Services["prometheus"]
	if !slices.Contains(prom.Command, "--enable-feature=exemplar-storage") {
		t.Errorf("prometheus: command %q does not keep exemplars (--enable-feature=exemplar-storage)", prom.Command)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName         string   `yaml:"job_name"`
			ScrapeProtocols []string `yaml:"scrape_protocols"`
		} `yaml:"scrape_configs"`
	}
	b, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != "shop" {
			continue
		}
		found = true
		if p := sc.ScrapeProtocols; len(p) > 0 && !strings.HasPrefix(p[0], "OpenMetricsText") {
			t.Errorf("prometheus.yml: job shop asks for %q first; exemplars come only with OpenMetrics", p)
		}
	}
	if !found {
		t.Error("prometheus.yml: no job shop")
	}
}

// written is docker-compose.yml as written, before compose renders it.
type written struct {
	Services map[string]struct {
		Volumes []string `yaml:"volumes"`
	} `yaml:"services"`
}

func rawCompose(t *testing.T) written {
	t.Helper()
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc written
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// scriptValue returns the value a shell script assigns to name
// (name=value on a line of its own).
func scriptValue(t *testing.T, script, name string) string {
	t.Helper()
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s assigns no %s", script, name)
	}
	return string(m[1])
}

// The ha profile (make failover-demo): a synchronous standby, and the
// settings of deploy/ha.env that make it one.

// haEnv returns the settings of deploy/ha.env, as deploy/up.sh --ha and
// deploy/failover.sh read them: KEY=value lines.
func haEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("ha.env")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(\S*)$`).FindStringSubmatch(line); m != nil {
			env[m[1]] = m[2]
		}
	}
	for _, k := range []string{"SHOP_PG_SYNC_STANDBY", "SHOP_COMPOSE_DATABASE_URL"} {
		if env[k] == "" {
			t.Fatalf("ha.env sets no %s", k)
		}
	}
	return env
}

// haComposed renders docker-compose.yml as deploy/up.sh --ha starts it.
func haComposed(t *testing.T) composed {
	t.Helper()
	env := []string{"COMPOSE_PROFILES=ha"}
	for k, v := range haEnv(t) {
		env = append(env, k+"="+v)
	}
	return composeConfig(t, env...)
}

// setting returns the value of a server setting a postgres command sets
// with -c name=value, and whether it sets it.
func setting(command []string, name string) (string, bool) {
	for i := 0; i+1 < len(command); i++ {
		if v, ok := strings.CutPrefix(command[i+1], name+"="); command[i] == "-c" && ok {
			return v, true
		}
	}
	return "", false
}

// syncStandbyNames returns the standby names a synchronous_standby_names
// value lists: "a", "a, b", "FIRST 1 (a)", "ANY 2 (a, b)".
func syncStandbyNames(v string) []string {
	if open, close := strings.Index(v, "("), strings.LastIndex(v, ")"); open >= 0 && close > open {
		v = v[open+1 : close]
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.Trim(strings.TrimSpace(n), `"`); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// conninfo returns the keywords of a libpq key=value connection string
// without quoted values (primary_conninfo).
func conninfo(s string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(s) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// databaseURLs returns each service's SHOP_DATABASE_URL, failing when
// fewer services have one than run the binary against the database.
func databaseURLs(t *testing.T, c composed) map[string]string {
	t.Helper()
	urls := map[string]string{}
	for name, s := range c.Services {
		if u, ok := s.Environment["SHOP_DATABASE_URL"]; ok {
			urls[name] = u
		}
	}
	for _, name := range []string{"api-1", "api-2", "migrate", "seed"} {
		if _, ok := urls[name]; !ok {
			t.Fatalf("%s has no SHOP_DATABASE_URL: the scan is broken", name)
		}
	}
	return urls
}

// dbHosts parses a database URL as the shop does (its configuration, then
// pgx) and returns the hosts pgx tries, in order, and whether it accepts
// only a server that takes writes.
func dbHosts(t *testing.T, service, raw string) ([]string, bool) {
	t.Helper()
	if _, err := config.FromEnv(func(k string) string {
		if k == "SHOP_DATABASE_URL" {
			return raw
		}
		return ""
	}); err != nil {
		t.Fatalf("%s: the shop refuses SHOP_DATABASE_URL %q: %v", service, raw, err)
	}
	cfg, err := pgconn.ParseConfig(raw)
	if err != nil {
		t.Fatalf("%s: pgx refuses SHOP_DATABASE_URL %q: %v", service, raw, err)
	}
	hosts := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, f := range cfg.Fallbacks {
		hosts = append(hosts, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
	}
	readWrite := cfg.ValidateConnect != nil &&
		reflect.ValueOf(cfg.ValidateConnect).Pointer() == reflect.ValueOf(pgconn.ValidateConnectTargetSessionAttrsReadWrite).Pointer()
	return hosts, readWrite
}

// TestCompose_HAOffByDefault: without the ha profile and deploy/ha.env,
// compose runs what it ran before the profile existed: the standby only
// in the profile, a primary whose commits wait for no standby (a name
// there with no standby streaming would hang every commit), and every
// service on the primary alone.
func TestCompose_HAOffByDefault(t *testing.T) {
	c := composeConfig(t)
	if s, ok := c.Services["postgres-standby"]; ok && !slices.Equal(s.Profiles, []string{"ha"}) {
		t.Errorf("postgres-standby: profiles %q, want only ha", s.Profiles)
	}
	primary := c.Services["postgres"]
	if len(primary.Profiles) != 0 {
		t.Errorf("postgres: profiles %q, want none", primary.Profiles)
	}
	if v, _ := setting(primary.Command, "synchronous_standby_names"); v != "" {
		t.Errorf("postgres: synchronous_standby_names %q without the ha profile: every commit would wait for a standby that is not there", v)
	}
	for name, raw := range databaseURLs(t, c) {
		hosts, readWrite := dbHosts(t, name, raw)
		if !slices.Equal(hosts, []string{"postgres:5432"}) || readWrite {
			t.Errorf("%s: SHOP_DATABASE_URL %q tries %q (only a writable server: %v), want the primary alone", name, raw, hosts, readWrite)
		}
	}
}

// TestCompose_HAProfile: with the ha profile and deploy/ha.env (deploy/up.sh
// --ha), the standby runs the primary's image on a volume of its own,
// copies and streams from the primary under the name the primary's
// synchronous_standby_names waits for, with the role the primary's
// first-start script creates and lets replicate; every service that
// connects to the database tries the primary, then the standby, and
// takes only the one that accepts writes.
func TestCompose_HAProfile(t *testing.T) {
	c := haComposed(t)
	primary, standby := c.Services["postgres"], c.Services["postgres-standby"]
	if standby.Image == "" || standby.Image != primary.Image {
		t.Errorf("postgres-standby: image %q, want the primary's %q", standby.Image, primary.Image)
	}
	custom := composeConfig(t, "COMPOSE_PROFILES=ha", "POSTGRES_IMAGE=shop-local/postgres:t").Services
	if custom["postgres-standby"].Image != "shop-local/postgres:t" {
		t.Errorf("postgres-standby: image %q with POSTGRES_IMAGE=shop-local/postgres:t", custom["postgres-standby"].Image)
	}

	// The standby's name is the one the primary waits for.
	sync, _ := setting(primary.Command, "synchronous_standby_names")
	names := syncStandbyNames(sync)
	raw, ok := setting(standby.Command, "primary_conninfo")
	if !ok {
		t.Fatalf("postgres-standby: command %q sets no primary_conninfo", standby.Command)
	}
	ci := conninfo(raw)
	if len(names) == 0 || !slices.Contains(names, ci["application_name"]) {
		t.Errorf("postgres: synchronous_standby_names %q does not name the standby's application_name %q", sync, ci["application_name"])
	}
	if _, ok := c.Services[ci["host"]]; ci["host"] != "postgres" || !ok {
		t.Errorf("postgres-standby: primary_conninfo host %q, want the primary's service, postgres", ci["host"])
	}
	if slot, _ := setting(standby.Command, "primary_slot_name"); slot == "" || slot != standby.Environment["SHOP_PG_SLOT"] {
		t.Errorf("postgres-standby: primary_slot_name %q, the slot standby.sh creates %q", slot, standby.Environment["SHOP_PG_SLOT"])
	}
	// The primary's first start, whose temporary server no standby can
	// reach, must not wait for one on its commits.
	if !strings.Contains(primary.Environment["PGOPTIONS"], "synchronous_commit=local") {
		t.Errorf("postgres: PGOPTIONS %q: the image's first-start scripts would wait for the standby", primary.Environment["PGOPTIONS"])
	}

	// The role: created, allowed to replicate, with the standby's password.
	script, err := os.ReadFile("postgres/replication.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`CREATE ROLE ` + regexp.QuoteMeta(ci["user"]) + ` WITH LOGIN REPLICATION\b`).Match(script) {
		t.Errorf("postgres/replication.sh creates no replication role %q (the standby's user)", ci["user"])
	}
	if !regexp.MustCompile(`host replication ` + regexp.QuoteMeta(ci["user"]) + ` all `).Match(script) {
		t.Errorf("postgres/replication.sh adds no pg_hba line for replication by %q", ci["user"])
	}
	pw := primary.Environment["SHOP_PG_REPLICATION_PASSWORD"]
	if pw == "" || pw != ci["password"] || pw != standby.Environment["SHOP_PG_REPLICATION_PASSWORD"] {
		t.Errorf("replication password: the primary's %q, the standby's %q, its primary_conninfo's %q", pw, standby.Environment["SHOP_PG_REPLICATION_PASSWORD"], ci["password"])
	}
	raws := rawCompose(t).Services
	if !slices.Contains(raws["postgres"].Volumes, "./deploy/postgres/replication.sh:/docker-entrypoint-initdb.d/replication.sh:ro") {
		t.Errorf("postgres: volumes %q do not mount postgres/replication.sh among the first-start scripts", raws["postgres"].Volumes)
	}
	data := func(vols []string) string {
		for _, v := range vols {
			if name, ok := strings.CutSuffix(v, ":/var/lib/postgresql/data"); ok {
				return name
			}
		}
		return ""
	}
	if p, s := data(raws["postgres"].Volumes), data(raws["postgres-standby"].Volumes); s == "" || s == p {
		t.Errorf("postgres-standby: data volume %q, want one of its own (the primary's: %q)", s, p)
	}

	for name, raw := range databaseURLs(t, c) {
		hosts, readWrite := dbHosts(t, name, raw)
		if !slices.Equal(hosts, []string{"postgres:5432", "postgres-standby:5432"}) || !readWrite {
			t.Errorf("%s: SHOP_DATABASE_URL %q tries %q (only a writable server: %v), want the primary, then the standby, read-write only", name, raw, hosts, readWrite)
		}
	}
}

func TestCompose_SyncStandbyNames(t *testing.T) {
	for in, want := range map[string][]string{
		"standby":           {"standby"},
		"FIRST 1 (standby)": {"standby"},
		`ANY 2 ("s1", s2)`:  {"s1", "s2"},
		"":                  nil,
		"standby, other":    {"standby", "other"},
	} {
		if got := syncStandbyNames(in); !slices.Equal(got, want) {
			t.Errorf("syncStandbyNames(%q) = %q, want %q", in, got, want)
		}
	}
}
