package seats

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
)

// Guards are the middleware the routes are protected with.
type Guards struct {
	User  echo.MiddlewareFunc // a registered user's bearer token
	Admin echo.MiddlewareFunc // the admin token
	// Idempotency is the Idempotency-Key handling (layer 0) of a flow,
	// FlowHold or FlowConfirm: idempotency.Store.Atomic, whose record the
	// hold's (the confirm's) transaction claims and completes.
	Idempotency func(flow string) echo.MiddlewareFunc
	// PublicLimit is the per-address limit on the reads that need no
	// token; WriteLimit the per-user limit on holds, confirms and
	// releases. WriteLimit runs after User and before Idempotency.
	PublicLimit echo.MiddlewareFunc
	WriteLimit  echo.MiddlewareFunc
}

// Register mounts the event, hold and booking routes on g (the /v1
// group). Each route lists its protections where it is registered.
func Register(g *echo.Group, svc *Service, guard Guards) {
	h := handlers{svc: svc}
	g.POST("/events", h.createEvent, guard.Admin)
	g.GET("/events/:id", h.event, guard.PublicLimit)
	g.GET("/events/:id/seats", h.seatMap, guard.PublicLimit)
	g.POST("/events/:id/holds", h.hold, guard.User, guard.WriteLimit, guard.Idempotency(FlowHold))
	g.GET("/holds", h.listHolds, guard.User)
	g.GET("/holds/:id", h.getHold, guard.User)
	g.DELETE("/holds/:id", h.release, guard.User, guard.WriteLimit)
	g.POST("/holds/:id/confirm", h.confirm, guard.User, guard.WriteLimit, guard.Idempotency(FlowConfirm))
	g.GET("/bookings/:id", h.booking, guard.User)
}

type handlers struct{ svc *Service }

// The JSON shapes of API.md, "Seats".
type (
	eventResponse struct {
		ID          string    `json:"id"`
		Name        string    `json:"name"`
		Available   int       `json:"available"`
		Held        int       `json:"held"`
		Booked      int       `json:"booked"`
		Rows        int       `json:"rows"`
		SeatsPerRow int       `json:"seats_per_row"`
		CreatedAt   time.Time `json:"created_at"`
	}
	seatResponse struct {
		Seat   string     `json:"seat"`
		Status SeatStatus `json:"status"`
	}
	holdResponse struct {
		ID        string     `json:"id"`
		EventID   string     `json:"event_id"`
		Seats     []string   `json:"seats"`
		Status    HoldStatus `json:"status"`
		ExpiresAt time.Time  `json:"expires_at"`
	}
	bookingResponse struct {
		ID        string    `json:"id"`
		EventID   string    `json:"event_id"`
		HoldID    string    `json:"hold_id"`
		Seats     []string  `json:"seats"`
		Status    string    `json:"status"`
		CreatedAt time.Time `json:"created_at"`
	}
	createEventRequest struct {
		Name        string `json:"name"`
		Rows        int    `json:"rows"`
		SeatsPerRow int    `json:"seats_per_row"`
	}
	holdRequest struct {
		Seats []string `json:"seats"`
	}
	noBody struct{}
)

func toEvent(ev Event) eventResponse {
	return eventResponse{ID: ev.ID, Name: ev.Name, Available: ev.Available, Held: ev.Held, Booked: ev.Booked,
		Rows: ev.Rows, SeatsPerRow: ev.SeatsPerRow, CreatedAt: ev.CreatedAt.UTC()}
}

func toHold(h Hold) holdResponse {
	return holdResponse{ID: h.ID, EventID: h.EventID, Seats: h.Seats, Status: h.Status, ExpiresAt: h.ExpiresAt.UTC()}
}

func toBooking(b Booking) bookingResponse {
	return bookingResponse{ID: b.ID, EventID: b.EventID, HoldID: b.HoldID, Seats: b.Seats, Status: "confirmed", CreatedAt: b.CreatedAt.UTC()}
}

func (h handlers) createEvent(c echo.Context) error {
	var req createEventRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	ev, err := h.svc.CreateEvent(c.Request().Context(), req.Name, req.Rows, req.SeatsPerRow)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/events/"+ev.ID)
	return httpx.JSON(c, http.StatusCreated, toEvent(ev))
}

func (h handlers) event(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	ev, err := h.svc.Event(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, toEvent(ev))
}

func (h handlers) seatMap(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	m, err := h.svc.SeatMap(c.Request().Context(), id)
	if err != nil {
		return err
	}
	items := make([]seatResponse, len(m))
	for i, s := range m {
		items[i] = seatResponse{Seat: s.Label, Status: s.Status}
	}
	return httpx.JSON(c, http.StatusOK, map[string]any{"items": items})
}

func (h handlers) hold(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	var req holdRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	key := c.Request().Header.Get(idempotency.HeaderKey)
	hold, err := h.svc.Hold(c.Request().Context(), p.UserID, key, id, req.Seats)
	if err != nil {
		return err
	}
	// The bytes stored with the key in the hold's transaction, when it
	// has one: a replay is the same.
	return idempotency.Send(c, heldAnswer(hold))
}

// heldAnswer is the answer to a hold: 201 with its Location, the answer
// its Idempotency-Key stores and replays.
func heldAnswer(h Hold) idempotency.Answer {
	return idempotency.Answer{Status: http.StatusCreated, Location: "/v1/holds/" + h.ID, Body: toHold(h)}
}

// bookedAnswer is the answer to a confirm: 201 with the booking's
// Location, stored and replayed like heldAnswer.
func bookedAnswer(b Booking) idempotency.Answer {
	return idempotency.Answer{Status: http.StatusCreated, Location: "/v1/bookings/" + b.ID, Body: toBooking(b)}
}

func (h handlers) listHolds(c echo.Context) error {
	limit, err := httpx.Limit(c)
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	items, next, err := h.svc.ActiveHolds(c.Request().Context(), p.UserID, c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, httpx.NewPage(items, next, toHold))
}

func (h handlers) getHold(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	hold, err := h.svc.HoldOf(c.Request().Context(), p.UserID, id)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, toHold(hold))
}

func (h handlers) release(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	if err := httpx.Bind(c, &noBody{}); err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	hold, err := h.svc.Release(c.Request().Context(), p.UserID, id)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, toHold(hold))
}

func (h handlers) confirm(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	if err := httpx.Bind(c, &noBody{}); err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	b, err := h.svc.Confirm(c.Request().Context(), p.UserID, id)
	if err != nil {
		return err
	}
	return idempotency.Send(c, bookedAnswer(b))
}

func (h handlers) booking(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	b, err := h.svc.Booking(c.Request().Context(), p.UserID, id)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, toBooking(b))
}
