package lab

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// TestRace_SchemaKeepsAWindow: the live schema holds more users than the
// lab keeps (earlier runs'); the next race empties it of them before it
// starts, keeping the migrations' version and the relay's offsets, so the
// schema stops growing with every run. While a run on another replica
// holds the schema, a race leaves it as it is: the sweep never empties
// tables under a run.
func TestRace_SchemaKeepsAWindow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		otherRun  bool
		wantSwept bool
	}{
		{"Swept", false, true},
		{"AnotherRunHoldsIt", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testenv.Pool(t)
			testenv.Users(t, pool, keepUsers+1)
			if _, err := pool.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
				VALUES ('relay', 7, '42')`); err != nil {
				t.Fatal(err)
			}
			if tt.otherRun {
				release, err := holdSchema(ctx, pool)
				if err != nil {
					t.Fatal(err)
				}
				defer release()
			}
			l := New(Config{Demo: true, Live: func(context.Context) (Target, error) {
				// No shop behind the URL: the run fails its requests; what
				// is judged is the schema before it.
				return Target{Name: "live", URL: "http://127.0.0.1:1", Pool: pool, Metrics: metrics.New()}, nil
			}})
			e := httpx.New(metrics.New(), httpx.Options{})
			pass := func(next echo.HandlerFunc) echo.HandlerFunc { return next }
			Register(e.Group("/v1"), l, Guards{User: pass, RaceLimit: pass})
			req := httptest.NewRequest(http.MethodPost, "/v1/lab/races", strings.NewReader(`{"scenario":"flash_sale","size":10}`))
			req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("race: %d %s", rec.Code, rec.Body)
			}

			var users, offsets, migrations int
			if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users WHERE name NOT LIKE 'lab-%'),
				(SELECT count(*) FROM watermill_offsets_outbox), (SELECT count(*) FROM schema_migrations)`).Scan(&users, &offsets, &migrations); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.wantSwept && users != 0:
				t.Errorf("%d users of earlier runs left after the race, want none: the schema grows with every run", users)
			case !tt.wantSwept && users != keepUsers+1:
				t.Errorf("%d users of earlier runs left, want all %d: a run held the schema", users, keepUsers+1)
			}
			if offsets != 1 || migrations != 1 {
				t.Errorf("offsets rows %d, migrations rows %d; want both kept", offsets, migrations)
			}
		})
	}
}
