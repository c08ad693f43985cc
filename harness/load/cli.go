package load

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shop-example/shop/harness/k6compat"
)

// The exit codes, as k6's.
const (
	ExitThresholds = 99  // a threshold failed
	ExitScript     = 107 // the script could not run, or its setup or teardown threw
	ExitUsage      = 2   // the command line is wrong
)

// ExitError ends `shop load` with Code; Err, if any, was printed already.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return "exit " + strconv.Itoa(e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

const usage = `usage: shop load [flags] SCRIPT.js   (also: shop load run [flags] SCRIPT.js, as k6 run)

Runs a k6 script without k6 (the subset of harness/k6compat). Exit codes as
k6's: 0 every threshold held, 99 a threshold failed, 107 a script error (it
could not run, setup or teardown threw, or it used a k6 API this runner lacks).

flags:
  -e, --env KEY=VALUE      add to __ENV (again for more); the process's own
                           environment is in __ENV too, as with k6
  -u, --vus N              VUs; with a script of scenarios, only with -d or -i
  -d, --duration 30s       run the default function this long on --vus VUs
                           (replaces the script's scenarios, as in k6)
  -i, --iterations N       run the default function N times in all (same)
      --summary-export F   the end-of-test summary as JSON (k6's format)
  -o, --out json=F         every sample, one JSON line each (k6's format)
      --report F.html      a static HTML report: latency and requests/s over
                           time, a table per endpoint
  -q, --quiet              no progress line
`

// config is one invocation's command line.
type config struct {
	script        string
	env           map[string]string
	shortcuts     k6compat.Shortcuts
	summaryExport string
	outJSON       string
	report        string
	quiet         bool
}

// envFlag collects -e KEY=VALUE.
type envFlag map[string]string

func (e envFlag) String() string { return "" }

func (e envFlag) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", kv)
	}
	e[k] = v
	return nil
}

// outFlag reads -o json=FILE, the one output this runner writes.
type outFlag struct{ path *string }

func (o outFlag) String() string { return "" }

func (o outFlag) Set(v string) error {
	kind, path, _ := strings.Cut(v, "=")
	if kind != "json" || path == "" {
		return fmt.Errorf("output %q is not supported: only json=FILE", v)
	}
	*o.path = path
	return nil
}

// parseArgs reads k6's flags, before or after the script.
func parseArgs(args []string, environ []string, stderr io.Writer) (config, error) {
	cfg := config{env: map[string]string{}}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			cfg.env[k] = v
		}
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("shop load", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	env := envFlag(cfg.env)
	var dur string
	for _, name := range []string{"e", "env"} {
		fs.Var(env, name, "")
	}
	for _, name := range []string{"u", "vus"} {
		fs.IntVar(&cfg.shortcuts.VUs, name, 0, "")
	}
	for _, name := range []string{"d", "duration"} {
		fs.StringVar(&dur, name, "", "")
	}
	for _, name := range []string{"i", "iterations"} {
		fs.IntVar(&cfg.shortcuts.Iterations, name, 0, "")
	}
	for _, name := range []string{"o", "out"} {
		fs.Var(outFlag{&cfg.outJSON}, name, "")
	}
	for _, name := range []string{"q", "quiet"} {
		fs.BoolVar(&cfg.quiet, name, false, "")
	}
	fs.StringVar(&cfg.summaryExport, "summary-export", "", "")
	fs.StringVar(&cfg.report, "report", "", "")

	var scripts []string
	for {
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
		if fs.NArg() == 0 {
			break
		}
		scripts = append(scripts, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(scripts) != 1 {
		return cfg, fmt.Errorf("want one script, got %d", len(scripts))
	}
	cfg.script = scripts[0]
	if dur != "" {
		d, err := time.ParseDuration(dur)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("--duration %q is not a duration like 30s", dur)
		}
		cfg.shortcuts.Duration = d
	}
	if cfg.shortcuts.VUs < 0 || cfg.shortcuts.Iterations < 0 {
		return cfg, errors.New("--vus and --iterations must be positive")
	}
	return cfg, nil
}

// Run is `shop load ARGS`: the summary goes to stdout, progress and the
// script's log to stderr. It returns nil when every threshold held, else
// an *ExitError with k6's code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args, os.Environ(), stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if err != nil {
		fmt.Fprintf(stderr, "shop load: %v\n\n%s", err, usage)
		return &ExitError{Code: ExitUsage, Err: err}
	}

	out := newConsole(stderr, cfg.quiet)
	live := &k6compat.Live{}
	started := time.Now()
	stop := out.progress(live, started)
	res, err := k6compat.Run(ctx, k6compat.Config{
		Script: cfg.script, Env: cfg.env, Shortcuts: cfg.shortcuts, Live: live,
		// Without a bound of its own: the scripts' scenarios end themselves;
		// Ctrl-C (ctx) ends the run.
		Timeout: 24 * time.Hour,
		Client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}},
		Logf:    out.logf,
	})
	stop(res)
	if err != nil {
		out.line(fmt.Sprintf("ERRO script error: %v", err))
		return &ExitError{Code: ExitScript, Err: err}
	}

	writeSummary(stdout, res)
	for _, o := range []struct {
		path  string
		write func(io.Writer, *k6compat.Result) error
	}{{cfg.summaryExport, writeSummaryExport}, {cfg.outJSON, writeSamples}, {cfg.report, writeReport}} {
		if o.path == "" {
			continue
		}
		if err := writeFile(o.path, res, o.write); err != nil {
			out.line(fmt.Sprintf("ERRO %v", err))
			return &ExitError{Code: 1, Err: err}
		}
	}
	return exitCode(res)
}

// exitCode is k6's: a script error before a failed threshold.
func exitCode(res *k6compat.Result) error {
	if res.SetupError != "" || res.TeardownError != "" || len(res.Unsupported) > 0 {
		return &ExitError{Code: ExitScript}
	}
	for _, th := range res.Thresholds {
		if !th.OK {
			return &ExitError{Code: ExitThresholds}
		}
	}
	return nil
}

func writeFile(path string, res *k6compat.Result, write func(io.Writer, *k6compat.Result) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := write(f, res); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
