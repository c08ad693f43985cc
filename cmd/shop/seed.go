package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// demoCatalogue is the catalogue `shop seed` loads: a little of everything,
// and one scarce product to race for.
var demoCatalogue = []inventory.Product{
	{SKU: "TSHIRT-BLK-M", Name: "T-shirt, black, M", PriceCents: 1999, StockAvailable: 500},
	{SKU: "TSHIRT-WHT-L", Name: "T-shirt, white, L", PriceCents: 1999, StockAvailable: 500},
	{SKU: "MUG-LOGO", Name: "Mug with logo", PriceCents: 1299, StockAvailable: 200},
	{SKU: "STICKER-PACK", Name: "Sticker pack", PriceCents: 499, StockAvailable: 10000},
	{SKU: "HOODIE-GRY-L", Name: "Hoodie, grey, L", PriceCents: 4999, StockAvailable: 100},
	{SKU: "SNEAKER-LTD", Name: "Limited sneaker (flash sale)", PriceCents: 18999, StockAvailable: 50},
}

// seed loads the demo catalogue. Products that exist are left alone, so it
// can run on every start.
func seed(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := inventory.NewStore(pool, nil)
	created := 0
	for _, p := range demoCatalogue {
		_, err := store.Create(ctx, p)
		switch {
		case errors.Is(err, inventory.ErrExists):
		case err != nil:
			return fmt.Errorf("seed %s: %w", p.SKU, err)
		default:
			created++
		}
	}
	logger.Info("seeded", "created", created, "catalogue", len(demoCatalogue))
	return nil
}
