package app

import (
	"context"
	"log/slog"

	"github.com/shop-example/shop/internal/mailer"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
)

// ServeMailer runs `shop mailer`, the stand-in mail provider, on
// cfg.MailerAddr until ctx ends, then drains in-flight requests and
// closes its journal.
func ServeMailer(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	srv, err := mailer.New(mailer.Options{
		JournalPath: cfg.MailerJournal,
		KeyTTL:      cfg.MailerKeyTTL,
		FailRate:    cfg.MailerFailRate,
		Delay:       cfg.MailerDelay,
		Logger:      logger,
	})
	if err != nil {
		return err
	}
	defer srv.Close() //nolint:errcheck // every message was fsynced when it was answered

	logger.Info("mailer listening", "addr", cfg.MailerAddr, "journal", cfg.MailerJournal,
		"key_ttl", cfg.MailerKeyTTL.String(), "fail_rate", cfg.MailerFailRate, "delay", cfg.MailerDelay.String())
	err = httpx.Serve(ctx, nil, cfg.MailerAddr, srv.Handler(), cfg.ShutdownDrain)
	logger.Info("mailer stopped", "err", err)
	return err
}
