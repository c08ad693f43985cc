package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// healthTimeout bounds one probe; a container healthcheck gives it about
// as long before it gives up on its own.
const healthTimeout = 2 * time.Second

// health is `shop health <url>`: GET the URL and succeed on 200. It is the
// containers' healthcheck, because the runtime image need not have wget or
// curl, and the binary is already in it.
func health(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	// No proxy from the environment: the probe is of this container.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s", args[0], resp.Status)
	}
	return nil
}
