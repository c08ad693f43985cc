package inventory

import (
	"errors"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shop-example/shop/internal/platform/problem"
)

// Product is an item for sale and the stock left of it.
type Product struct {
	SKU            string
	Name           string
	PriceCents     int64
	StockAvailable int
	// Version changes with every edit of Name or PriceCents; stock
	// movements do not change it (see the migration's comment).
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Line is a quantity of one SKU, as taken from or returned to stock.
type Line struct {
	SKU      string
	Quantity int
}

// Limits of the inventory rules.
const (
	MaxStock          = 1_000_000_000
	MaxRestock        = 1_000_000
	MaxPriceCents     = 100_000_000_00 // one hundred million dollars
	maxNameCharacters = 200
)

// Errors returned by this package. They are problems with codes, matched
// with errors.Is; the copies returned carry a precise detail.
var (
	ErrNotFound        = problem.New(problem.NotFound, "no such product")
	ErrExists          = problem.New(problem.AlreadyExists, "product already exists")
	ErrOutOfStock      = problem.New(problem.OutOfStock, "not enough stock")
	ErrVersionMismatch = problem.New(problem.VersionMismatch, "the product changed since it was read")
	// ErrStockConstraint accompanies ErrOutOfStock when the CHECK constraint,
	// not the conditional update, refused the decrement.
	ErrStockConstraint = errors.New("stock refused by " + ConstraintStockNonNegative)
)

var skuPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidSKU reports whether sku is 1–64 of [A-Za-z0-9_-].
func ValidSKU(sku string) bool { return skuPattern.MatchString(sku) }

// Validate checks a new product.
func (p Product) Validate() error {
	if !ValidSKU(p.SKU) {
		return problem.New(problem.Invalid, "sku: must be 1–64 characters of A-Z, a-z, 0-9, _ and -")
	}
	if err := validateName(p.Name); err != nil {
		return err
	}
	if err := validatePrice(p.PriceCents); err != nil {
		return err
	}
	if p.StockAvailable < 0 || p.StockAvailable > MaxStock {
		return problem.Errorf(problem.Invalid, "stock: must be 0–%d", MaxStock)
	}
	return nil
}

// Patch is an edit of a product's attributes; nil fields stay as they are.
type Patch struct {
	Name       *string
	PriceCents *int64
}

// Validate checks an edit.
func (p Patch) Validate() error {
	if p.Name == nil && p.PriceCents == nil {
		return problem.New(problem.Invalid, "body: give name, price_cents or both")
	}
	if p.Name != nil {
		if err := validateName(*p.Name); err != nil {
			return err
		}
	}
	if p.PriceCents != nil {
		return validatePrice(*p.PriceCents)
	}
	return nil
}

// ValidateRestock checks a restock quantity.
func ValidateRestock(quantity int) error {
	if quantity < 1 || quantity > MaxRestock {
		return problem.Errorf(problem.Invalid, "quantity: must be 1–%d", MaxRestock)
	}
	return nil
}

func validateName(name string) error {
	n := utf8.RuneCountInString(name)
	if n < 1 || n > maxNameCharacters || strings.TrimSpace(name) == "" {
		return problem.Errorf(problem.Invalid, "name: must be 1–%d characters", maxNameCharacters)
	}
	// The HTTP edge refuses them in every field already; a name from
	// elsewhere (seed, tools) must not bring one either.
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return problem.New(problem.Invalid, "name: must not contain control characters")
	}
	return nil
}

func validatePrice(cents int64) error {
	if cents < 0 || cents > MaxPriceCents {
		return problem.Errorf(problem.Invalid, "price_cents: must be 0–%d", int64(MaxPriceCents))
	}
	return nil
}
