//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// mailedWithin bounds the wait for the events after the commit: they
// leave through the outbox, the relay and a Redis stream after the
// payment's commit, in well under a second when nothing is wrong, and a
// consumer's missed event is published again 30 s after its commit
// (SHOP_OUTBOX_REDELIVER_AFTER).
const mailedWithin = 75 * time.Second

// Every order the clients were told is paid ends fulfilled, with one
// receipt in the mailer's own audit, read on its published port; a
// cancelled order is never fulfilled and gets no receipt.
func (sc *scenario) mailedAndFulfilledOnce(ctx context.Context, t *testing.T) {
	if len(sc.paid) == 0 {
		t.Fatal("no paid orders to check")
	}
	start := time.Now()
	for {
		problems, err := sc.afterTheCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) == 0 {
			t.Logf("after the commit: %d paid orders fulfilled, one receipt each, within %s; %d cancelled orders, none mailed",
				len(sc.paid), time.Since(start).Round(100*time.Millisecond), len(sc.cancelled))
			return
		}
		if time.Since(start) > mailedWithin {
			for _, p := range problems {
				t.Error(p)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// afterTheCommit reads every buyer's orders through the API and the
// mailer's receipts, and says what is not yet as it must end.
func (sc *scenario) afterTheCommit(ctx context.Context) ([]string, error) {
	var page struct {
		Items []struct {
			Reference string `json:"reference"`
		} `json:"items"`
	}
	resp, err := sc.c.do(ctx, request{method: http.MethodGet, base: sc.s.mailer, path: "/v1/messages?kind=receipt"})
	if err == nil && resp.status != http.StatusOK {
		err = fmt.Errorf("mailer audit: %s", resp)
	}
	if err == nil {
		err = resp.decode(&page)
	}
	if err != nil {
		return nil, err
	}
	receipts := map[string]int{}
	for _, m := range page.Items {
		receipts[m.Reference]++
	}
	status := map[string]string{}
	for _, b := range sc.buyers {
		os, err := listOrders(ctx, sc.c, b.Token)
		if err != nil {
			return nil, err
		}
		for _, o := range os {
			status[o.ID] = o.Status
		}
	}
	var problems []string
	for id := range sc.paid {
		if status[id] != "fulfilled" {
			problems = append(problems, fmt.Sprintf("paid order %s is %q, not fulfilled", id, status[id]))
		}
		if n := receipts[id]; n != 1 {
			problems = append(problems, fmt.Sprintf("paid order %s: %d receipts, want 1", id, n))
		}
	}
	for _, id := range sc.cancelled {
		if status[id] == "fulfilled" || receipts[id] != 0 {
			problems = append(problems, fmt.Sprintf("cancelled order %s is %q with %d receipts", id, status[id], receipts[id]))
		}
	}
	return problems, nil
}
