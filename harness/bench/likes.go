package bench

// `shop bench likes` measures how fast one hot post can be liked, with the
// like count kept exact, in one run:
//
//   - the counter design alone (SQL: no HTTP, no auth, no lock): the like
//     row and the post's count written in one statement, as
//     likes.Store.QueueMove writes them, on a post whose count is spread
//     over 1, 4, 16 or 64 counter rows (-shards), against the baseline of
//     one counter row, posts.like_count, updated in the same statement
//     (UPDATE posts SET like_count = like_count + 1);
//   - the whole layered flow (the real service behind a real http.Server on
//     127.0.0.1: bearer token, the lock on like:{user}:{post}, the state,
//     the version-checked write, the primary key) on a post with each of
//     those numbers of counter rows; one counter row is the single-row
//     baseline of the whole flow;
//   - the spread case: each like is of a post picked at random from -posts,
//     with likes.DefaultShards counter rows each, in both;
//   - what the counter rows cost a reader: GET of a post as the store
//     reads it (its count summed from its counter rows, and liked_by_me),
//     in SQL, for each number of counter rows.
//
// Each of -clients clients (64 by default) is a user of its own; each
// request flips that user's like of the post (like, unlike, like, ...),
// so every request changes the count. A like counts when the SQL write
// went through, or when PUT or DELETE answered 200 with the state asked
// for. After each scenario the bench checks the count of every post the
// scenario used against its like rows (the sum of the counter rows, or
// posts.like_count, against the liked rows) and reports whether it was
// exact; it exits non-zero if one was not.
//
// As in the other benches, the load generator, the service, PostgreSQL and
// Redis share the machine's CPUs, and nothing crosses a real network.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/internal/likes"
)

// The goals of the like bench: the counter design alone at least 3× the
// single counter row's likes per second; the whole flow with it at least
// 2× the same flow with the single row, p99 under 100 ms.
const (
	goalCounterRatio = 3.0
	goalFlowRatio    = 2.0
)

// likeScenario is a scenario and the posts whose counts it must leave
// exact.
type likeScenario struct {
	scenario
	posts  []string
	single bool // the count is posts.like_count, not counter rows
}

func benchLikes(ctx context.Context, o benchOptions, logger *slog.Logger) (err error) {
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	if _, err := pool.Exec(ctx, sqlSingleAddColumn); err != nil {
		return fmt.Errorf("add the single-row baseline's column: %w", err)
	}
	userIDs, tokens, err := seedUsers(ctx, pool, o.clients)
	if err != nil {
		return err
	}
	seed := func(n, shards int) []string {
		if err != nil {
			return nil
		}
		var ids []string
		ids, err = seedPosts(ctx, pool, userIDs[0], n, shards)
		return ids
	}
	var scenarios []likeScenario
	add := func(name string, posts []string, toggle orderFunc, layered, single bool) {
		scenarios = append(scenarios, likeScenario{
			scenario: scenario{name: name, skus: posts, order: toggle, layered: layered}, posts: posts, single: single})
	}
	sqlFlow := func() *sqlLikeFlow { return newSQLLikeFlow(pool, userIDs) }
	add("sql/single-row", seed(1, 1), sqlFlow().toggleSingle, false, true)
	hot := map[int][]string{}
	for _, n := range o.shardCounts {
		hot[n] = seed(1, n)
		add("sql/shards="+strconv.Itoa(n), hot[n], sqlFlow().toggle, false, false)
	}
	add("sql/spread", seed(o.posts, likes.DefaultShards), sqlFlow().toggle, false, false)
	// The reads run on the hot posts the sql scenarios left liked by
	// about half the clients; they check no count (they change none).
	for _, n := range o.shardCounts {
		scenarios = append(scenarios, likeScenario{scenario: scenario{name: "read/shards=" + strconv.Itoa(n),
			skus: hot[n], order: sqlFlow().read}})
	}
	if err != nil {
		return err
	}
	svc, err := startService(ctx, o, db.url, "", tokens)
	if err != nil {
		return err
	}
	defer svc.stop()
	layeredFlow := func() *layeredLikeFlow { return newLayeredLikeFlow(svc, o.clients) }
	for _, n := range o.shardCounts {
		add("layered/shards="+strconv.Itoa(n), seed(1, n), layeredFlow().toggle, true, false)
	}
	add("layered/spread", seed(o.posts, likes.DefaultShards), layeredFlow().toggle, true, false)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}

	plain := make([]scenario, len(scenarios))
	for i, sc := range scenarios {
		plain[i] = sc.scenario
	}
	results, err := runScenarios(ctx, pool, o, plain, logger)
	if err != nil {
		return err
	}
	exact := make([]string, len(scenarios))
	allExact := true
	for i, sc := range scenarios {
		if sc.posts == nil {
			exact[i] = "—"
			continue
		}
		drifted, err := driftedPosts(ctx, pool, sc.posts, sc.single)
		if err != nil {
			return err
		}
		exact[i] = "yes"
		if drifted > 0 {
			exact[i], allExact = fmt.Sprintf("NO: %d posts", drifted), false
		}
	}
	var report strings.Builder
	printLikesReport(&report, o, results, exact, svc.lockOutcomes())
	fmt.Fprint(os.Stdout, report.String())
	if err := o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: "benchmarks/likes", Rows: resultNames(results), Body: asMarkdown(report.String())}); err != nil {
		return err
	}
	if !allExact {
		return errors.New("bench likes: a count was not exact (see the report)")
	}
	return nil
}

// printLikesReport writes the results as a Markdown table, then the two
// comparisons against their goals.
func printLikesReport(w io.Writer, o benchOptions, results []result, exact []string, lockOutcomes string) {
	fmt.Fprintf(w, "\nshop bench likes: %d clients, each a user flipping its like; %s measured after %s warmup per scenario; spread over %d posts of %d counter rows; %d CPUs, GOMAXPROCS %d, %s\n\n",
		o.clients, o.duration, o.warmup, o.posts, likes.DefaultShards, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	byName := make(map[string]result, len(results))
	for _, reads := range []bool{false, true} {
		unit := "likes/s"
		if reads {
			unit = "reads/s"
		}
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
		fmt.Fprintf(tw, "| scenario\t %s\t p50\t p99\t errors\t exact\t\n", unit)
		fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---\t---\t")
		for i, r := range results {
			if strings.HasPrefix(r.name, "read/") != reads {
				continue
			}
			byName[r.name] = r
			fmt.Fprintf(tw, "| %s\t %.0f\t %s\t %s\t %s\t %s\t\n", r.name, r.rate(), millis(r.p50), millis(r.p99), r.errorSummary(), exact[i])
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	def := "shards=" + strconv.Itoa(likes.DefaultShards)
	if base, ours := byName["sql/single-row"], byName["sql/"+def]; base.orders > 0 {
		ratio := ours.rate() / base.rate()
		fmt.Fprintf(w, "counter alone: sql/%s / sql/single-row = %.2f: goal (ratio >= %.0f) %s\n",
			def, ratio, goalCounterRatio, verdict(ratio >= goalCounterRatio && ours.orders > 0))
	}
	if base, ours := byName["layered/shards=1"], byName["layered/"+def]; base.orders > 0 {
		ratio := ours.rate() / base.rate()
		fmt.Fprintf(w, "whole flow:    layered/%s / layered/shards=1 = %.2f, p99 %s: goal (ratio >= %.0f, p99 < %s) %s\n",
			def, ratio, millis(ours.p99), goalFlowRatio, goalP99, verdict(ratio >= goalFlowRatio && ours.p99 < goalP99 && ours.orders > 0))
	}
	fmt.Fprintf(w, "service lock: %s\n", lockOutcomes)
}

func verdict(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}

// sqlSeedPosts creates n posts by author, each with shards counter rows
// at zero, as likes.Store.CreatePost does for one, and returns their ids.
const sqlSeedPosts = `WITH p AS (
		INSERT INTO posts (id, author_id, title, like_shards, created_at)
		SELECT gen_random_uuid(), $1, 'bench post ' || g, $3, now() FROM generate_series(1, $2) AS g
		RETURNING id),
	s AS (
		INSERT INTO post_like_shards (post_id, shard, n)
		SELECT p.id, g, 0 FROM p, generate_series(0, $3 - 1) AS g)
	SELECT id::text FROM p`

func seedPosts(ctx context.Context, pool *pgxpool.Pool, author string, n, shards int) ([]string, error) {
	rows, err := pool.Query(ctx, sqlSeedPosts, author, n, shards)
	if err != nil {
		return nil, fmt.Errorf("seed posts: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("seed posts: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("seed posts: %w", err)
	}
	return ids, nil
}

// driftedPosts counts the posts whose count is not their liked rows: the
// sum of their counter rows, or with single their posts.like_count.
func driftedPosts(ctx context.Context, pool *pgxpool.Pool, posts []string, single bool) (int, error) {
	query := sqlDriftedSharded
	if single {
		query = sqlDriftedSingle
	}
	var n int
	if err := pool.QueryRow(ctx, query, posts).Scan(&n); err != nil {
		return 0, fmt.Errorf("check counts: %w", err)
	}
	return n, nil
}

const (
	sqlDriftedSharded = `SELECT count(*)::int FROM posts p WHERE p.id = ANY($1::uuid[])
		AND (SELECT coalesce(sum(n), 0) FROM post_like_shards s WHERE s.post_id = p.id)
		 <> (SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked)`
	sqlDriftedSingle = `SELECT count(*)::int FROM posts p WHERE p.id = ANY($1::uuid[])
		AND p.like_count <> (SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked)`
)
