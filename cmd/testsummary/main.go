// Command testsummary runs `go test -json` with the arguments it is given
// and shows the run as a plain `go test` would, ending with one line that
// counts the tests (package testsummary). It exits non-zero when go test
// did or a test failed. $GO names the go command (default: go).
//
// Before go test it starts the servers the tests need, once for the whole
// run (testenv.Servers: a PostgreSQL and three Redis containers, unless
// SHOP_TEST_POSTGRES_URL and SHOP_TEST_REDIS_ADDRS name running ones), so
// the test packages share them instead of each starting its own; it stops
// them when go test ends.
//
//	go run ./cmd/testsummary -race -count=1 ./...
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/testsummary"
)

func main() {
	code, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// run runs go test -json args and returns the exit code the run earns.
func run(args []string) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	servers, stopServers, err := testenv.Servers(ctx)
	defer stopServers()
	if err != nil {
		return 1, fmt.Errorf("start the test servers: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, append([]string{"test", "-json"}, args...)...)
	cmd.Env = append(os.Environ(), servers...)
	cmd.Stderr = os.Stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		return 1, err
	}
	if err := cmd.Start(); err != nil {
		return 1, err
	}
	counts, readErr := testsummary.Read(events, os.Stdout)
	_, _ = io.Copy(io.Discard, events) // whatever is left, so go test can end
	waitErr := cmd.Wait()
	fmt.Println(counts)
	var exit *exec.ExitError
	switch {
	case readErr != nil:
		return 1, fmt.Errorf("read go test's events: %w", readErr)
	case errors.As(waitErr, &exit):
		return max(exit.ExitCode(), 1), nil
	case waitErr != nil:
		return 1, waitErr
	case counts.Failed > 0:
		return 1, nil
	}
	return 0, nil
}
