package standin

import (
	"context"
	"log/slog"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/internal/platform/config"
)

// Mailer runs `shop mailer`, the stand-in mail provider, on
// cfg.MailerAddr until ctx ends, then drains in-flight requests and
// closes its journal.
func Mailer(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	tp, stop, err := providerTracing(cfg, "shop-mailer")
	if err != nil {
		return err
	}
	defer stop()
	srv, err := mailer.New(mailer.Options{
		JournalPath: cfg.MailerJournal,
		KeyTTL:      cfg.MailerKeyTTL,
		FailRate:    cfg.MailerFailRate,
		Delay:       cfg.MailerDelay,
		Logger:      logger,
		Tracing:     tp,
	})
	if err != nil {
		return err
	}
	return serveProvider(ctx, logger, "mailer", cfg.MailerAddr, cfg.ShutdownDrain, srv, "journal", cfg.MailerJournal,
		"key_ttl", cfg.MailerKeyTTL.String(), "fail_rate", cfg.MailerFailRate, "delay", cfg.MailerDelay.String())
}
