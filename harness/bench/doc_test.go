package bench

import "testing"

func TestAsMarkdown(t *testing.T) {
	report := "\nshop bench orders: 32 clients\n\nanomalies: none\n\n| scenario | orders/s |\n|---|---:|\n| raw/hot | 400 |\n\nhot layered/raw = 0.9\nservice lock: acquired=0\n"
	want := "```text\nshop bench orders: 32 clients\n\nanomalies: none\n```\n\n| scenario | orders/s |\n|---|---:|\n| raw/hot | 400 |\n\n```text\nhot layered/raw = 0.9\nservice lock: acquired=0\n```"
	if got := asMarkdown(report); got != want {
		t.Errorf("asMarkdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"orders", "-duration", "1s", "-db", "postgres://a b"})
	if want := "bin/shop bench orders -duration 1s -db 'postgres://a b'"; got != want {
		t.Errorf("commandLine = %q, want %q", got, want)
	}
}

// TestBlockRows_NamesEveryBlock: every block a bench writes has rows,
// and a name no bench writes is an error, not an empty list.
func TestBlockRows_NamesEveryBlock(t *testing.T) {
	for _, name := range []string{"benchmarks/orders", "benchmarks/payments", "benchmarks/likes", "benchmarks/seats", "benchmarks/events",
		"strategies/orders", "strategies/payments", "strategies/seats", "strategies/likes", "strategies/goals"} {
		rows, err := BlockRows(name)
		if err != nil || len(rows) == 0 {
			t.Errorf("BlockRows(%s) = %q, %v", name, rows, err)
		}
	}
	if _, err := BlockRows("benchmarks/nothing"); err == nil {
		t.Error("BlockRows of a block no bench writes did not fail")
	}
}
