package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/auth"
)

// DemoCatalogue is the catalogue `shop seed` loads: a little of
// everything, and one scarce product to race for.
var DemoCatalogue = []inventory.Product{
	{SKU: "TSHIRT-BLK-M", Name: "T-shirt, black, M", PriceCents: 1999, StockAvailable: 500},
	{SKU: "TSHIRT-WHT-L", Name: "T-shirt, white, L", PriceCents: 1999, StockAvailable: 500},
	{SKU: "MUG-LOGO", Name: "Mug with logo", PriceCents: 1299, StockAvailable: 200},
	{SKU: "STICKER-PACK", Name: "Sticker pack", PriceCents: 499, StockAvailable: 10000},
	{SKU: "HOODIE-GRY-L", Name: "Hoodie, grey, L", PriceCents: 4999, StockAvailable: 100},
	{SKU: "SNEAKER-LTD", Name: "Limited sneaker (flash sale)", PriceCents: 18999, StockAvailable: 50},
}

// Seed loads the demo catalogue and returns how many products it created.
// Products that exist are left alone, so it can run on every start.
func Seed(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	store := inventory.NewStore(pool, nil)
	created := 0
	for _, p := range DemoCatalogue {
		_, err := store.Create(ctx, p)
		switch {
		case errors.Is(err, inventory.ErrExists):
		case err != nil:
			return created, fmt.Errorf("seed %s: %w", p.SKU, err)
		default:
			created++
		}
	}
	return created, nil
}

// SeedDemoUser makes sure the demo user ("demo") exists with the token
// derived from the admin token (auth.DemoToken) and returns that token. It
// can run on every start: the same admin token gives the same token.
func SeedDemoUser(ctx context.Context, pool *pgxpool.Pool, adminToken string) (auth.User, string, error) {
	if adminToken == "" {
		return auth.User{}, "", errors.New("the demo user needs an admin token")
	}
	token := auth.DemoToken(adminToken)
	u, err := auth.NewStore(pool).PutUser(ctx, auth.DemoUserID, "demo", token)
	if err != nil {
		return auth.User{}, "", fmt.Errorf("seed demo user: %w", err)
	}
	return u, token, nil
}
