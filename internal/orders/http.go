package orders

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Guards are the middleware the routes are protected with.
type Guards struct {
	User echo.MiddlewareFunc // a registered user's bearer token
	// Idempotency is the Idempotency-Key handling (layer 0) of create:
	// idempotency.Store.Atomic, whose record Create claims and completes
	// in the order's transaction.
	Idempotency echo.MiddlewareFunc
	// OrderLimit is the per-user limit on creating orders: each order
	// holds stock for the order TTL, so this is what stops one user from
	// reserving a product's whole stock. WriteLimit is the per-user limit
	// on the other writes. Both run after User (they count the user) and
	// before Idempotency (every attempt counts, a refusal claims no key).
	OrderLimit echo.MiddlewareFunc
	WriteLimit echo.MiddlewareFunc
}

// Register mounts the order routes on g (the /v1 group). Each route lists
// its protections where it is registered.
func Register(g *echo.Group, svc *Service, guard Guards) {
	h := handlers{svc: svc}
	g.POST("/orders", h.create, guard.User, guard.OrderLimit, guard.Idempotency)
	g.GET("/orders", h.list, guard.User)
	g.GET("/orders/:id", h.get, guard.User)
	g.POST("/orders/:id/cancel", h.cancel, guard.User, guard.WriteLimit)
}

type handlers struct{ svc *Service }

type itemJSON struct {
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
	Returned       int    `json:"returned"`
}

// Response is the JSON of an order (API.md, "Orders").
type Response struct {
	ID            string     `json:"id"`
	Status        Status     `json:"status"`
	Items         []itemJSON `json:"items"`
	TotalCents    int64      `json:"total_cents"`
	RefundedCents int64      `json:"refunded_cents"`
	Version       int64      `json:"version"`
	CreatedAt     time.Time  `json:"created_at"`
	ExpiresAt     time.Time  `json:"expires_at"`
}

// ToResponse renders an order.
func ToResponse(o Order) Response {
	items := make([]itemJSON, len(o.Items))
	for i, it := range o.Items {
		items[i] = itemJSON{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: it.UnitPriceCents, Returned: it.Returned}
	}
	return Response{ID: o.ID, Status: o.Status, Items: items, TotalCents: o.TotalCents, RefundedCents: o.RefundedCents,
		Version: o.Version, CreatedAt: o.CreatedAt.UTC(), ExpiresAt: o.ExpiresAt.UTC()}
}

type createRequest struct {
	Items []struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	} `json:"items"`
}

// DecodeCreate decodes and validates the body of POST /v1/orders.
func DecodeCreate(body []byte) ([]inventory.Line, error) {
	var req createRequest
	if err := httpx.Decode(body, &req); err != nil {
		return nil, err
	}
	lines := make([]inventory.Line, len(req.Items))
	for i, it := range req.Items {
		lines[i] = inventory.Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	if err := ValidateLines(lines); err != nil {
		return nil, err
	}
	return lines, nil
}

func (h handlers) create(c echo.Context) error {
	body, err := httpx.ReadBody(c)
	if err != nil {
		return err
	}
	lines, err := DecodeCreate(body)
	if err != nil {
		return err
	}
	key := c.Request().Header.Get(idempotency.HeaderKey)
	if key == "" {
		return problem.New(problem.IdempotencyRequired, "Idempotency-Key: required on this route")
	}
	ctx := c.Request().Context()
	p, _ := auth.PrincipalFrom(ctx)
	o, err := h.svc.Create(ctx, p.UserID, key, lines)
	if err != nil {
		return err
	}
	// The bytes stored with the key in the order's transaction, when it
	// has one: a replay is the same.
	return idempotency.Send(c, created(o))
}

// created is the answer to a placed order: 201 with its Location, the
// answer its Idempotency-Key stores and replays.
func created(o Order) idempotency.Answer {
	return idempotency.Answer{Status: http.StatusCreated, Location: "/v1/orders/" + o.ID, Body: ToResponse(o)}
}

func (h handlers) list(c echo.Context) error {
	limit, err := httpx.Limit(c)
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	items, next, err := h.svc.List(c.Request().Context(), p.UserID, c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, httpx.NewPage(items, next, ToResponse))
}

func (h handlers) get(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	o, err := h.svc.Get(c.Request().Context(), p.UserID, id)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, ToResponse(o))
}

func (h handlers) cancel(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	o, err := h.svc.Cancel(c.Request().Context(), p.UserID, id)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, ToResponse(o))
}
