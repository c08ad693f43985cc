package bench

// With -doc, each bench writes its result tables into their generated
// blocks of a Markdown file (docs/BENCHMARKS.md, docs/STRATEGIES.md),
// naming the command line, the commit and the machine (package docblock).
// A block's rows are the names of the scenarios or cells that ran;
// BlockRows says which rows the code runs now, without running anything,
// so that docs/docs_test.go can tell a table measured by older code.
//
// Figures measured while other work keeps the cores busy are that work's
// as much as the code's, so -doc is refused, before anything is measured,
// while the one-minute load average is above the cores (boxGate). -settle
// waits for the box to quieten first; -loaded writes anyway, the block's
// machine marked docblock.LoadedMarker for every reader to see.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// docTarget is where and as what a bench writes its blocks: set by Run
// when -doc names a file.
type docTarget struct {
	path    string // the Markdown file
	command string // the command line that measured, as a reader types it
	commit  string // docblock.Commit of the file's repository
	machine string // the docblock.Box read before the measurement
}

// ErrLoadedBox means -doc was refused: the box was busier than its cores.
var ErrLoadedBox = errors.New("the box is loaded")

// boxGate is the quiet-box check of -doc: how the box is read, and how to
// wait between two readings.
type boxGate struct {
	read  func() docblock.Box
	sleep func(ctx context.Context, d time.Duration) error
}

// machineGate reads this machine. The load average is recomputed every
// 5 s, so reading it more often sees nothing new.
func machineGate() boxGate {
	return boxGate{read: docblock.ReadBox, sleep: func(ctx context.Context, d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}}
}

// loadPoll is how often a gate waiting for the box to settle reads it.
const loadPoll = 5 * time.Second

// wait returns the box the run starts on. A quiet box passes; a loaded
// one is read again every loadPoll for up to o.settle (a bench just
// before this one leaves the load high for a minute or two), then passes
// only with o.loaded, its machine marked loaded; else ErrLoadedBox, which
// says the load, the cores and what to do.
func (g boxGate) wait(ctx context.Context, o benchOptions, logger *slog.Logger) (docblock.Box, error) {
	box := g.read()
	for waited := time.Duration(0); !box.Quiet() && waited < o.settle; waited += loadPoll {
		if waited == 0 {
			logger.Info("bench: waiting for the load average to fall to the cores", "load", box.Load, "cores", box.Cores, "up to", o.settle)
		}
		if err := g.sleep(ctx, loadPoll); err != nil {
			return box, err
		}
		box = g.read()
	}
	switch {
	case box.Quiet():
		return box, nil
	case o.loaded:
		logger.Warn("bench: measuring on a loaded box, as -loaded says; the tables are marked "+docblock.LoadedMarker, "load", box.Load, "cores", box.Cores)
		return box, nil
	case box.LoadErr != nil:
		return box, fmt.Errorf("%w: its load average cannot be read (%v), so nothing shows the %d cores were free; nothing was measured. Pass -loaded to write the tables marked %s",
			ErrLoadedBox, box.LoadErr, box.Cores, docblock.LoadedMarker)
	}
	waited := ""
	if o.settle > 0 {
		waited = fmt.Sprintf(" after waiting %s for it to fall", o.settle)
	}
	return box, fmt.Errorf("%w: the 1-minute load average is %.2f%s, above the %d cores, so the figures would be the other work's as much as the code's; nothing was measured. "+
		"Stop the other work and run again once `uptime` shows a load of at most %d (-settle 3m waits for it), or pass -loaded to write the tables marked %s",
		ErrLoadedBox, box.Load, waited, box.Cores, box.Cores, docblock.LoadedMarker)
}

// newDocTarget checks, before anything is measured, that the figures will
// belong to a commit: the code of path's repository has no changes that
// are not committed. box is the machine the run starts on.
func newDocTarget(path string, args []string, box docblock.Box) (*docTarget, error) {
	// The whole repository, not only the file's directory: the code
	// measured is everywhere but docs/.
	top, err := exec.Command("git", "-C", filepath.Dir(path), "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return nil, fmt.Errorf("-doc %s: not in a git repository: %w", path, err)
	}
	commit, err := docblock.Commit(strings.TrimSpace(string(top)))
	if err != nil {
		return nil, fmt.Errorf("-doc %s: %w", path, err)
	}
	return &docTarget{path: path, command: commandLine(args), commit: commit, machine: box.String()}, nil
}

// commandLine is `bin/shop bench` and its arguments, quoted where a shell
// would need it.
func commandLine(args []string) string {
	words := []string{"bin/shop", "bench"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$`\\*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

// write puts the blocks into the file, each body a report as the bench
// prints it (asMarkdown), adding the server versions to the machine.
func (d *docTarget) write(ctx context.Context, pool *pgxpool.Pool, redisAddrs []string, blocks ...docblock.Block) error {
	if d == nil {
		return nil
	}
	machine := d.machine + ", " + runtime.Version() + " GOMAXPROCS " + strconv.Itoa(runtime.GOMAXPROCS(0)) +
		", " + serverVersions(ctx, pool, redisAddrs)
	for i := range blocks {
		blocks[i].Command, blocks[i].Commit, blocks[i].Machine = d.command, d.commit, machine
	}
	return docblock.Update(d.path, blocks...)
}

// serverVersions names the PostgreSQL server and the Redis nodes measured
// against; a version that cannot be read is said so, not guessed.
func serverVersions(ctx context.Context, pool *pgxpool.Pool, redisAddrs []string) string {
	// fsync and synchronous_commit decide what a commit costs: a server
	// run for tests with fsync off commits many times faster.
	pg := "unknown"
	var fsync, syncCommit string
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')").
		Scan(&pg, &fsync, &syncCommit); err == nil {
		pg = fmt.Sprintf("%s (fsync=%s, synchronous_commit=%s)", strings.Fields(pg + " ")[0], fsync, syncCommit)
	}
	var versions []string
	clients := redisx.Clients(redisAddrs)
	defer redisx.Close(clients) //nolint:errcheck // read only
	for _, c := range clients {
		v := "unknown"
		if info, err := c.Info(ctx, "server").Result(); err == nil {
			for _, line := range strings.Split(info, "\n") {
				if after, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					v = after
				}
			}
		}
		if !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	return fmt.Sprintf("PostgreSQL %s, Redis %s (%d nodes)", pg, strings.Join(versions, "/"), len(redisAddrs))
}

// asMarkdown turns a report as the bench prints it into a block's body:
// its tables stay tables, and the lines between two tables (the
// conditions of the run, the goal lines, the lock counts) become one
// fenced text block.
func asMarkdown(report string) string {
	var out []string
	var text []string
	flush := func() {
		for len(text) > 0 && text[len(text)-1] == "" {
			text = text[:len(text)-1]
		}
		if len(text) > 0 {
			out = append(out, "```text")
			out = append(out, text...)
			out = append(out, "```", "")
			text = nil
		}
	}
	for _, line := range strings.Split(strings.Trim(report, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			flush()
			out = append(out, line)
		case strings.TrimSpace(line) == "" && len(text) > 0:
			text = append(text, "") // a run of text lines stays one block
		case strings.TrimSpace(line) == "":
			if len(out) > 0 && out[len(out)-1] != "" {
				out = append(out, "")
			}
		default:
			text = append(text, line)
		}
	}
	flush()
	return strings.TrimRight(strings.Join(out, "\n"), "\n")
}

// resultNames are the names of the scenarios that ran: a block's rows.
func resultNames(results []result) []string {
	names := make([]string, len(results))
	for i, r := range results {
		names[i] = r.name
	}
	return names
}

// The defaults that decide which rows a bench runs.
const defaultStorms = 3

var defaultShardCounts = []int{1, 4, 16, 64}

// orderScenarioNames are the rows of `shop bench orders`, in the order
// they run: per case, the raw baseline, then the layered flow.
func orderScenarioNames() []string {
	var names []string
	for _, shape := range []string{hot, spread} {
		names = append(names, "raw/"+shape, "layered/"+shape)
	}
	return names
}

// paymentRowNames are the rows of `shop bench payments`: its throughput
// scenarios, then one per duplicate storm.
func paymentRowNames(storms int) []string {
	names := []string{"raw/distinct", "layered/distinct"}
	for i := range storms {
		names = append(names, "storm/"+strconv.Itoa(i+1))
	}
	return names
}

// likeScenarioNames are the rows of `shop bench likes`, in the order they
// run.
func likeScenarioNames(shardCounts []int) []string {
	names := []string{"sql/single-row"}
	for _, n := range shardCounts {
		names = append(names, "sql/shards="+strconv.Itoa(n))
	}
	names = append(names, "sql/spread")
	for _, n := range shardCounts {
		names = append(names, "read/shards="+strconv.Itoa(n))
	}
	for _, n := range shardCounts {
		names = append(names, "layered/shards="+strconv.Itoa(n))
	}
	return append(names, "layered/spread")
}

// seatScenarioNames are the rows of `shop bench seats`: the baselines,
// then each lock strategy of the service on both events.
func seatScenarioNames() []string {
	var names []string
	for _, sh := range seatShapes {
		names = append(names, "raw/"+sh.name)
	}
	for _, s := range seatStrategies {
		for _, sh := range seatShapes {
			names = append(names, s.name+"/"+sh.name)
		}
	}
	return names
}

// strategyCellNames are the rows of one flow's table of `shop bench
// strategies`: case/strategy, for every strategy the flow has a row for.
func strategyCellNames(f flowSpec, shapes, only []string) []string {
	var names []string
	for _, shape := range shapes {
		for _, name := range strategyNames {
			if _, ok := f.strategies[name]; ok && (len(only) == 0 || slices.Contains(only, name)) {
				names = append(names, shape+"/"+name)
			}
		}
	}
	return names
}

// ErrNoSuchBlock means no bench writes a block of that name.
var ErrNoSuchBlock = errors.New("no bench writes this block")

// BlockRows returns the rows of the generated block name as the code
// would measure them now with its default flags, without measuring
// anything: "benchmarks/orders", "benchmarks/payments", "benchmarks/likes",
// "benchmarks/seats", "benchmarks/events" (docs/BENCHMARKS.md),
// "strategies/<flow>", "strategies/goals" and "strategies/outside"
// (docs/STRATEGIES.md).
func BlockRows(name string) ([]string, error) {
	switch name {
	case "benchmarks/orders":
		return orderScenarioNames(), nil
	case "benchmarks/payments":
		return paymentRowNames(defaultStorms), nil
	case "benchmarks/likes":
		return likeScenarioNames(defaultShardCounts), nil
	case "benchmarks/seats":
		return seatScenarioNames(), nil
	case eventsBlock:
		return eventRowNames(), nil
	case tracingBlock:
		return tracingRowNames(defaultTracingRounds), nil
	case outsideBlock:
		return outsideRowNames(outsideFlowNames(), []string{hot, spread}), nil
	case goalsBlock, historyBlock:
		return goalCells(), nil
	}
	if flow, ok := strings.CutPrefix(name, "strategies/"); ok {
		for _, f := range strategyFlows() {
			if f.name == flow {
				return strategyCellNames(f, []string{hot, spread}, nil), nil
			}
		}
	}
	return nil, fmt.Errorf("%s: %w", name, ErrNoSuchBlock)
}
