package refunds

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Guards are the middleware the routes are protected with.
type Guards struct {
	// OwnerOrAdmin admits a registered user's token or the admin token;
	// the flow admits a user to their own orders only (404 otherwise).
	OwnerOrAdmin echo.MiddlewareFunc
	// Idempotency is the Idempotency-Key handling (layer 0) of a refund:
	// idempotency.Store.Atomic, whose record Refund claims in the
	// transaction that begins the refund and completes in the one that
	// records its success.
	Idempotency echo.MiddlewareFunc
	WriteLimit  echo.MiddlewareFunc // rate limit per user; after OwnerOrAdmin, before Idempotency
}

// Register mounts the refund routes on g (the /v1 group). Each route
// lists its protections where it is registered.
func Register(g *echo.Group, svc *Service, guard Guards) {
	h := handlers{svc: svc}
	g.POST("/orders/:id/refunds", h.refund, guard.OwnerOrAdmin, guard.WriteLimit, guard.Idempotency)
	g.GET("/orders/:id/refunds", h.list, guard.OwnerOrAdmin)
}

type handlers struct{ svc *Service }

type itemJSON struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Response is the JSON of a refund (API.md, "Refunds").
type Response struct {
	ID          string     `json:"id"`
	OrderID     string     `json:"order_id"`
	AmountCents int64      `json:"amount_cents"`
	Status      Status     `json:"status"`
	Reason      *string    `json:"reason"`
	Items       []itemJSON `json:"items"`
	CreatedAt   time.Time  `json:"created_at"`
}

// ToResponse renders a refund; reason is null when none was given, items
// empty for a refund of money alone.
func ToResponse(r Refund) Response {
	out := Response{ID: r.ID, OrderID: r.OrderID, AmountCents: r.AmountCents, Status: r.Status,
		Items: make([]itemJSON, len(r.Items)), CreatedAt: r.CreatedAt.UTC()}
	if r.Reason != "" {
		out.Reason = &r.Reason
	}
	for i, l := range r.Items {
		out.Items[i] = itemJSON{SKU: l.SKU, Quantity: l.Quantity}
	}
	return out
}

type refundRequest struct {
	AmountCents *int64     `json:"amount_cents"`
	Reason      *string    `json:"reason"`
	Items       []itemJSON `json:"items"`
}

// DecodeRequest decodes and validates the body of POST
// /v1/orders/{id}/refunds. Every member is optional; an amount that is
// given must be a whole number of cents, at least one.
func DecodeRequest(body []byte) (Request, error) {
	var req refundRequest
	if err := httpx.Decode(body, &req); err != nil {
		return Request{}, err
	}
	var q Request
	if req.AmountCents != nil {
		if *req.AmountCents < 1 {
			return Request{}, problem.New(problem.Invalid, "amount_cents: must be a positive integer")
		}
		q.AmountCents = *req.AmountCents
	}
	if req.Reason != nil {
		q.Reason = *req.Reason
	}
	for _, it := range req.Items {
		q.Items = append(q.Items, inventory.Line{SKU: it.SKU, Quantity: it.Quantity})
	}
	return q, q.Validate()
}

// refunder is who the request is from.
func refunder(c echo.Context) orders.Refunder {
	p, _ := auth.PrincipalFrom(c.Request().Context())
	return orders.Refunder{UserID: p.UserID, Admin: p.Admin}
}

func (h handlers) refund(c echo.Context) error {
	orderID, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(c)
	if err != nil {
		return err
	}
	req, err := DecodeRequest(body)
	if err != nil {
		return err
	}
	key := c.Request().Header.Get(idempotency.HeaderKey)
	r, err := h.svc.Refund(c.Request().Context(), refunder(c), key, orderID, req)
	switch {
	case errors.Is(err, ErrOutcomeUnknown) && r.ID != "":
		// The processor did not say; the reconciler will. The client
		// polls GET /v1/orders/{id}/refunds.
		c.Response().Header().Set(echo.HeaderLocation, refundsURL(r.OrderID))
		return httpx.JSON(c, http.StatusAccepted, ToResponse(r))
	case err != nil:
		return err
	}
	// The bytes stored with the key in the settling transaction, when it
	// stored them: a replay is the same.
	return idempotency.Send(c, created(r))
}

// created is the answer to a refund that succeeded: 201 with the refund
// and where its order's refunds are, the answer its Idempotency-Key
// stores and replays.
func created(r Refund) idempotency.Answer {
	return idempotency.Answer{Status: http.StatusCreated, Location: refundsURL(r.OrderID), Body: ToResponse(r)}
}

func refundsURL(orderID string) string { return "/v1/orders/" + orderID + "/refunds" }

func (h handlers) list(c echo.Context) error {
	orderID, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	items, err := h.svc.Refunds(c.Request().Context(), refunder(c), orderID)
	if err != nil {
		return err
	}
	out := make([]Response, len(items))
	for i, it := range items {
		out[i] = ToResponse(it)
	}
	return httpx.JSON(c, http.StatusOK, map[string][]Response{"items": out})
}
