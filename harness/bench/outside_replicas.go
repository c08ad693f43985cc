package bench

// The replicas of `shop bench outside`: `shop serve` processes started
// as the compose stack runs them (two of them, one database, one lock
// quorum, one gateway), each on loopback ports of its own, with its log in
// a file that a failed run leaves behind.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// replicaEnv is what the replicas are started on; every other SHOP_*
// setting is the environment's, as `shop serve` reads it.
type replicaEnv struct {
	db      string   // the scratch database
	redis   []string // the lock quorum
	gateway string   // the stand-in gateway's URL
	admin   string   // SHOP_ADMIN_TOKEN, which the seeding uses
}

// How long a replica may take to answer /readyz after it starts, and to
// exit after SIGTERM (it drains in-flight requests first).
const (
	replicaStartTimeout = 30 * time.Second
	replicaStopTimeout  = 20 * time.Second
)

// replica is one `shop serve` process.
type replica struct {
	name       string
	url        string // the API
	metricsURL string
	cmd        *exec.Cmd
	done       chan struct{} // closed when the process has exited
}

// replicas are the bench's replicas and the directory of their logs.
type replicas struct {
	dir    string
	list   []*replica
	logger *slog.Logger
}

func replicaName(i int) string { return "outside-" + strconv.Itoa(i+1) }

// startReplicas starts outsideReplicas replicas of bin and waits until
// each answers /readyz: the database and a quorum of the lock's nodes
// answer, so none measures a flow without its lock.
func startReplicas(ctx context.Context, bin string, env replicaEnv, logger *slog.Logger) (*replicas, error) {
	dir, err := os.MkdirTemp("", "shop-bench-outside-")
	if err != nil {
		return nil, fmt.Errorf("replicas' logs: %w", err)
	}
	rs := &replicas{dir: dir, logger: logger}
	for i := range outsideReplicas {
		r, err := startReplica(ctx, bin, dir, replicaName(i), env)
		if err != nil {
			return nil, errors.Join(err, rs.stop(true))
		}
		rs.list = append(rs.list, r)
	}
	for _, r := range rs.list {
		if err := r.ready(ctx, filepath.Join(dir, r.name+".log")); err != nil {
			return nil, errors.Join(err, rs.stop(true))
		}
	}
	logger.Info("bench: replicas ready", "api", rs.urls(), "logs", dir)
	return rs, nil
}

func startReplica(ctx context.Context, bin, dir, name string, env replicaEnv) (*replica, error) {
	api, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	logs, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	defer logs.Close() //nolint:errcheck // the child has its own descriptor
	cmd := exec.Command(bin, "serve")
	// Later entries win: these override whatever the environment says.
	cmd.Env = append(os.Environ(),
		"SHOP_HTTP_ADDR="+api,
		"SHOP_METRICS_ADDR="+metrics,
		"SHOP_DATABASE_URL="+env.db,
		"SHOP_REDIS_ADDRS="+strings.Join(env.redis, ","),
		"SHOP_GATEWAY_URL="+env.gateway,
		"SHOP_ADMIN_TOKEN="+env.admin,
		"SHOP_REPLICA_NAME="+name,
		"SHOP_MIGRATE=false", // the bench migrated the scratch database
		// The bench's few users send hundreds of requests a second,
		// which the limits would refuse (loadtest/make-load.sh).
		"SHOP_RATE_LIMIT=off",
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("replica %s: start %s serve: %w", name, bin, err)
	}
	r := &replica{name: name, url: "http://" + api, metricsURL: "http://" + metrics, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	return r, nil
}

// freeLoopbackAddr is a 127.0.0.1 port nothing listens on now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// ready waits until the replica answers /readyz with 200; a replica that
// exits first, or does not answer in time, is an error with the end of
// its log.
func (r *replica) ready(ctx context.Context, logPath string) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(replicaStartTimeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/readyz", nil)
		if err != nil {
			return err
		}
		if res, err := client.Do(req); err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", res.StatusCode, strings.TrimSpace(string(body)))
		}
		select {
		case <-r.done:
			return fmt.Errorf("replica %s exited before it was ready: %s\n%s", r.name, r.cmd.ProcessState, logTail(logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("replica %s: /readyz did not answer 200 within %s (last: %s): are the database and a quorum of -redis nodes up?\n%s",
		r.name, replicaStartTimeout, last, logTail(logPath))
}

// logTail is the end of a replica's log, for an error.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const n = 2048
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (rs *replicas) urls() []string {
	urls := make([]string, len(rs.list))
	for i, r := range rs.list {
		urls[i] = r.url
	}
	return urls
}

// stop ends every replica as `docker compose stop` does, SIGTERM and then,
// past replicaStopTimeout, SIGKILL. The logs are removed, unless keepLogs
// (a failed run), then their directory is named.
func (rs *replicas) stop(keepLogs bool) error {
	var errs []error
	for _, r := range rs.list {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, r := range rs.list {
		select {
		case <-r.done:
		case <-time.After(replicaStopTimeout):
			_ = r.cmd.Process.Kill()
			<-r.done
			errs = append(errs, fmt.Errorf("replica %s did not stop within %s of SIGTERM; killed", r.name, replicaStopTimeout))
		}
	}
	if keepLogs || len(errs) > 0 {
		rs.logger.Warn("bench: the replicas' logs are kept", "dir", rs.dir)
		return errors.Join(errs...)
	}
	return errors.Join(append(errs, os.RemoveAll(rs.dir))...)
}

// outcomes reads every replica's metrics: the requests each answered,
// and the lock's outcomes summed over them, as lockOutcomes spells them.
func (rs *replicas) outcomes(ctx context.Context) (served []int, locks string, err error) {
	sums := map[string]float64{}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, r := range rs.list {
		families, err := scrape(ctx, client, r.metricsURL+"/metrics")
		if err != nil {
			return nil, "", fmt.Errorf("replica %s: %w", r.name, err)
		}
		n := 0.0
		for _, m := range families["shop_http_requests_total"].GetMetric() {
			n += m.GetCounter().GetValue()
		}
		served = append(served, int(n))
		for _, m := range families["shop_lock_acquisitions_total"].GetMetric() {
			sums[label(m, "outcome")] += m.GetCounter().GetValue()
		}
		for _, name := range []string{"degraded", "unlock_errors"} {
			for _, m := range families["shop_lock_"+name+"_total"].GetMetric() {
				sums[name] += m.GetCounter().GetValue()
			}
		}
	}
	parts := make([]string, 0, len(sums))
	for k, v := range sums {
		parts = append(parts, fmt.Sprintf("%s=%.0f", k, v))
	}
	sort.Strings(parts)
	return served, strings.Join(parts, " "), nil
}

// scrape reads a Prometheus text exposition.
func scrape(ctx context.Context, client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s answered %s", url, res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return families, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
