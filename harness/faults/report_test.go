//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/harness/testenv"
)

// report is where a run's table goes: SHOP_FAULTS_REPORT names a file
// (docs/RELIABILITY.md, or a scratch file), SHOP_UPDATE_DOCS=1 means
// docs/RELIABILITY.md. The commit and the machine are taken before the
// run, so that a run on a tree with code not committed stops at once
// rather than after its scenarios.
type report struct {
	path    string // "" when no report is asked for
	size    size
	commit  string
	machine string
	started time.Time
}

func newReport(sz size) (*report, error) {
	r := &report{size: sz, started: time.Now(), path: os.Getenv("SHOP_FAULTS_REPORT")}
	if r.path == "" && os.Getenv("SHOP_UPDATE_DOCS") != "" {
		r.path = filepath.Join("..", "..", "docs", "RELIABILITY.md")
	}
	if r.path == "" {
		return r, nil
	}
	commit, err := docblock.Commit(filepath.Join("..", ".."))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	r.commit, r.machine = commit, docblock.Machine()
	return r, nil
}

// write puts the results in the report's file as the generated block
// Block: into the block of that name when the file has one, else a file
// of its own. A run of some scenarios only (-run) writes nothing: the
// block's rows must be those the suite runs.
func (r *report) write(t *testing.T, c *cluster, results []result, scenarios int) {
	if r.path == "" {
		return
	}
	if len(results) != scenarios {
		t.Errorf("report: %d of %d scenarios ran; %s is not written", len(results), scenarios, r.path)
		return
	}
	var rows []string
	for _, res := range results {
		rows = append(rows, Scenario{Row: res.sc.row, Name: res.name}.Label())
	}
	r.put(t, Block, rows, r.body(c, results))
}

// put writes body into the report's file as the generated block name,
// with its rows: into the block of that name when the file has one, else
// a file of its own.
func (r *report) put(t *testing.T, name string, rows []string, body string) {
	if r.path == "" {
		return
	}
	b := docblock.Block{Name: name, Command: Command, Commit: r.commit, Machine: r.machine, Body: body, Rows: rows}
	err := docblock.Update(r.path, b)
	if errors.Is(err, os.ErrNotExist) {
		var text string
		if text, err = b.Render(); err == nil {
			err = os.WriteFile(r.path, []byte(text), 0o644)
		}
	}
	if err != nil {
		t.Errorf("report: %v", err)
	}
}

func (r *report) body(c *cluster, results []result) string {
	var b strings.Builder
	pg := "the test server (SHOP_TEST_POSTGRES_URL)"
	if os.Getenv(testenv.EnvPostgresURL) == "" {
		pg = "a container of " + os.Getenv(testenv.EnvPostgresImage)
	}
	var version string
	_ = c.db.QueryRow(context.Background(), `SHOW server_version`).Scan(&version)
	var brief []string
	for _, res := range results {
		if res.sc.brief {
			brief = append(brief, res.sc.row)
		}
	}
	fmt.Fprintf(&b, "Size %s: %d clients per flow (the refund storm %d); %s before, %s during (unless the row says), %s after the fault; rows %s: %s, %s, %s. "+
		"PostgreSQL %s, %s. The run took %s.\n\n",
		r.size.name, r.size.clients, 2*r.size.clients, r.size.before, r.size.during, r.size.after, strings.Join(brief, ", "),
		r.size.brief[0], r.size.brief[1], r.size.brief[2], version, pg, time.Since(r.started).Round(time.Second))
	fmt.Fprintln(&b, "| # | fault | flows | sent | useful/s before → during → after | floors during the fault | longest wait | failovers | p99 during | recovered in | verdict | audits |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, res := range results {
		flows := res.sc.flows
		if flows == nil {
			flows = allFlows
		}
		audits := "0 anomalies"
		if n := len(res.anomalies); n > 0 {
			audits = fmt.Sprintf("**%d anomalies**", n)
		}
		verdict := "passed"
		if n := len(res.failures) + len(res.anomalies); n > 0 {
			verdict = fmt.Sprintf("**failed** (%d)", n)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f → %.1f → %.1f | %s | %s | %d | %s | %s | %s | %s; %d paid, %d charges, %d refunded; %d refunds; flash %d/%d sold; %d likes; %d seats booked; %d receipts, %d ticket mails, %d refund mails |\n",
			res.sc.row, res.name, strings.Join(flows, ", "), res.sent, res.before.rate(), res.during.rate(), res.after.rate(),
			strings.Join(res.floors, "; "), res.longest.Round(time.Millisecond), res.failovers, res.p99During.Round(time.Millisecond),
			fmtRecover(res.recover), verdict, audits, res.audit.books.Paid, res.audit.books.Charges,
			res.audit.books.Refunded, res.audit.books.Refunds, res.audit.sold["SKU-FLASH"], res.audit.stocked, res.audit.liked, res.audit.tickets,
			res.eventsAudit.receipts, res.eventsAudit.tickets, res.eventsAudit.refundMails)
	}
	fmt.Fprintln(&b, "\nThe floors, and why each is where it is:")
	fmt.Fprintln(&b)
	for _, res := range results {
		for _, f := range res.sc.floors {
			fmt.Fprintf(&b, "- %s, %s: %s.\n", res.sc.row, f.spec(), f.why)
		}
		if res.sc.refused != nil {
			fmt.Fprintf(&b, "- %s, %s: none of their requests sent during the fault done, and every one the lock refused answered 503 `unavailable` with `Retry-After` (as many 503s as the replicas counted refusals): strict mode's promise while the lock's quorum is unreachable; requests a layer in front of the lock answers (a key in progress, a seat already taken) keep their own answers.\n",
				res.sc.row, strings.Join(res.sc.refused, ", "))
		}
	}
	if failed := failuresOf(results); failed != "" {
		fmt.Fprintln(&b, "\nWhat failed:")
		fmt.Fprintln(&b)
		b.WriteString(failed)
	}
	fmt.Fprintln(&b, "\nThe seat map's linearizability (porcupine, package seatcheck) under the faults that check it:")
	fmt.Fprintln(&b)
	for _, res := range results {
		if res.seatHistory != "" {
			fmt.Fprintf(&b, "- %s: %s\n", res.sc.row, res.seatHistory)
		}
	}
	fmt.Fprintln(&b, "\nUseful answers per second by flow, before → during → after:")
	fmt.Fprintln(&b)
	for _, res := range results {
		fmt.Fprintf(&b, "- %s: %s\n", res.sc.row, res.perFlow)
	}
	fmt.Fprintln(&b, "\nThe events after the commit: what the relays and the consumers counted over each scenario, and the audit after it (cumulative over the run: every order paid so far, every booking):")
	fmt.Fprintln(&b)
	for _, res := range results {
		fmt.Fprintf(&b, "- %s: %s\n", res.sc.row, res.events)
	}
	fmt.Fprintln(&b, "\nThe refund storm: what the replicas' refund flows and reconcilers counted over each scenario that runs it, and the audit of the refunds the clients were told of:")
	fmt.Fprintln(&b)
	for _, res := range results {
		if res.refunds != "" {
			fmt.Fprintf(&b, "- %s: %s\n", res.sc.row, res.refunds)
		}
	}
	fmt.Fprintln(&b, "\nWhat the replicas counted over each scenario (their /metrics):")
	fmt.Fprintln(&b)
	for _, res := range results {
		fmt.Fprintf(&b, "- %s: %s\n", res.sc.row, res.layers)
	}
	for _, res := range results {
		if res.extra != "" {
			fmt.Fprintf(&b, "\nScenario %s, %s\n", res.sc.row, res.extra)
		}
	}
	fmt.Fprintln(&b, "\nAnswers by flow, status and code (the whole run of the scenario):")
	fmt.Fprintln(&b)
	for _, res := range results {
		fmt.Fprintf(&b, "- %s %s — %s\n", res.sc.row, res.name, answersLine(res.answers))
	}
	return b.String()
}

func failuresOf(results []result) string {
	var b strings.Builder
	for _, res := range results {
		for _, f := range append(append([]string(nil), res.failures...), res.anomalies...) {
			fmt.Fprintf(&b, "- %s: %s\n", res.sc.row, f)
		}
	}
	return b.String()
}
