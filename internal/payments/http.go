package payments

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
)

// Guards are the middleware the routes are protected with.
type Guards struct {
	User echo.MiddlewareFunc // a registered user's bearer token
	// Idempotency is the Idempotency-Key handling (layer 0) of pay:
	// idempotency.Store.Atomic, whose record Pay claims in the transaction
	// that begins the payment and completes in the one that records its
	// success.
	Idempotency echo.MiddlewareFunc
	WriteLimit  echo.MiddlewareFunc // rate limit per user; after User, before Idempotency
}

// Register mounts the payment routes on g (the /v1 group). Each route
// lists its protections where it is registered.
func Register(g *echo.Group, svc *Service, guard Guards) {
	h := handlers{svc: svc}
	g.POST("/orders/:id/payments", h.pay, guard.User, guard.WriteLimit, guard.Idempotency)
	g.GET("/orders/:id/payments", h.list, guard.User)
}

type handlers struct{ svc *Service }

// Response is the JSON of a payment (API.md, "Payments").
type Response struct {
	ID          string    `json:"id"`
	OrderID     string    `json:"order_id"`
	Status      Status    `json:"status"`
	AmountCents int64     `json:"amount_cents"`
	ChargeID    *string   `json:"charge_id"`
	RefundID    *string   `json:"refund_id"`
	CreatedAt   time.Time `json:"created_at"`
}

// ToResponse renders a payment; charge_id is null until a charge is known,
// refund_id until the charge is refunded.
func ToResponse(p Payment) Response {
	r := Response{ID: p.ID, OrderID: p.OrderID, Status: p.Status, AmountCents: p.AmountCents, CreatedAt: p.CreatedAt.UTC()}
	if p.ChargeID != "" {
		r.ChargeID = &p.ChargeID
	}
	if p.RefundID != "" {
		r.RefundID = &p.RefundID
	}
	return r
}

type payRequest struct {
	PaymentMethod string `json:"payment_method"`
}

func (h handlers) pay(c echo.Context) error {
	orderID, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(c)
	if err != nil {
		return err
	}
	var req payRequest
	if err := httpx.Decode(body, &req); err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	key := c.Request().Header.Get(idempotency.HeaderKey)
	pay, err := h.svc.Pay(c.Request().Context(), p.UserID, key, orderID, req.PaymentMethod)
	switch {
	case errors.Is(err, ErrOutcomeUnknown) && pay.ID != "":
		// The gateway did not say; the reconciler will. The client polls
		// GET /v1/orders/{id}/payments.
		c.Response().Header().Set(echo.HeaderLocation, paymentsURL(pay.OrderID))
		return httpx.JSON(c, http.StatusAccepted, ToResponse(pay))
	case err != nil:
		return err
	}
	// The bytes stored with the key in the settling transaction, when it
	// stored them: a replay is the same.
	return idempotency.Send(c, paid(pay))
}

// paid is the answer to a payment that succeeded: 201 with the payment
// and where its order's payments are, the answer its Idempotency-Key
// stores and replays.
func paid(p Payment) idempotency.Answer {
	return idempotency.Answer{Status: http.StatusCreated, Location: paymentsURL(p.OrderID), Body: ToResponse(p)}
}

func paymentsURL(orderID string) string { return "/v1/orders/" + orderID + "/payments" }

func (h handlers) list(c echo.Context) error {
	orderID, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	items, err := h.svc.Payments(c.Request().Context(), p.UserID, orderID)
	if err != nil {
		return err
	}
	out := make([]Response, len(items))
	for i, it := range items {
		out[i] = ToResponse(it)
	}
	return httpx.JSON(c, http.StatusOK, map[string][]Response{"items": out})
}
