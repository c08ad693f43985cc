package faults

// The fault suite's table in docs/RELIABILITY.md is the generated block
// named Block, written by Command.
const (
	Block   = "faults/scenarios"
	Command = "make faults"
)

// Scenario names one row of the fault suite's table: its number and the
// fault. What the fault does, and the floor it is judged by, are in the
// suite itself (build tag faults), keyed by Row.
type Scenario struct {
	Row  string
	Name string
}

// Label is the row's name in the generated block: "7b PostgreSQL
// connections reset, twice 2.5 s apart".
func (s Scenario) Label() string { return s.Row + " " + s.Name }

// Scenarios are the rows `make faults` runs, in order. It runs nothing.
func Scenarios() []Scenario {
	return []Scenario{
		{"1", "one Redis node SIGKILLed, restarted"},
		{"2", "two of three Redis nodes restarted empty within the lease"},
		{"3a", "all Redis nodes down, degrade mode"},
		{"3b", "all Redis nodes down, strict mode"},
		{"4", "replica SIGSTOPped past the lease while paying and liking, resumed"},
		{"5", "replica SIGKILLed mid-payment, restarted"},
		{"6a", "gateway slow (2 s, beyond the 1 s timeout)"},
		{"6b", "gateway flaky (30% of connections reset)"},
		{"6c", "gateway blackholed"},
		{"6d", "gateway SIGKILLed, restarted"},
		{"7a", "PostgreSQL latency 1 ms each way"},
		{"7b", "PostgreSQL connections reset, twice 2.5 s apart"},
		{"7c", "PostgreSQL blackholed for 4 s"},
		{"8", "every Redis node 500 ms slower (past the per-node timeout)"},
		{"9", "rolling restart (SIGTERM, drain, start, one replica after the other), replica 0 moved from key scheme 1 to 2"},
		{"10", "the only relay SIGKILLed with events committed and not published, mails in flight; restarted"},
		{"11a", "mailer slow (2 s, beyond the 1 s mail timeout)"},
		{"11b", "mailer failing (half of new messages answer 503)"},
		{"11c", "mailer SIGKILLed, restarted"},
		{"12", "a transaction that wrote a row held open in another database of the server (10 s; 30 s at the large size), during a pay storm"},
		{"13a", "processor slow (2 s, beyond the 1 s timeout) during a refund storm"},
		{"13b", "processor flaky (30% of connections reset) during a refund storm"},
		{"13c", "processor blackholed during a refund storm"},
		{"13d", "processor SIGKILLed, restarted, during a refund storm"},
		{"14", "replica SIGKILLed mid-refund, restarted"},
	}
}

// The failover's table in docs/RELIABILITY.md is the generated block
// named FailoverBlock, written by TestFailover, which `make faults` runs
// beside TestFaults.
const FailoverBlock = "faults/failover"

// Failovers are the settings TestFailover fails PostgreSQL over under, in
// order: the one the shop is meant to run with, then each dangerous one,
// which the test requires to lose what the first keeps.
func Failovers() []string {
	return []string{
		"synchronous standby",
		"synchronous standby, SHOP_IDEMPOTENCY_ASYNC_COMMIT=true",
		"asynchronous standby",
	}
}

// Rows are the labels of Scenarios, the rows of the generated block.
func Rows() []string {
	var rows []string
	for _, s := range Scenarios() {
		rows = append(rows, s.Label())
	}
	return rows
}
