package inventory

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/problem"
)

// FlowRestock names the restock flow in the conflict counter.
const FlowRestock = "restock_product"

// Guards are the middleware the routes are protected with.
type Guards struct {
	Admin       echo.MiddlewareFunc // the admin token
	Idempotency echo.MiddlewareFunc // Idempotency-Key handling (layer 0): idempotency.Store.Atomic, whose record Restock claims and completes
	PublicLimit echo.MiddlewareFunc // rate limit per client address on the reads that need no token
}

// Register mounts the inventory routes on g (the /v1 group). Each route
// lists its protections where it is registered.
func Register(g *echo.Group, store *Store, guard Guards) {
	h := handlers{store: store}
	g.POST("/products", h.create, guard.Admin)
	g.GET("/products", h.list, guard.PublicLimit)
	g.GET("/products/:sku", h.get, guard.PublicLimit)
	g.PATCH("/products/:sku", h.update, guard.Admin)
	g.POST("/products/:sku/restock", h.restock, guard.Admin, guard.Idempotency)
}

type handlers struct{ store *Store }

type productResponse struct {
	SKU            string `json:"sku"`
	Name           string `json:"name"`
	PriceCents     int64  `json:"price_cents"`
	StockAvailable int    `json:"stock_available"`
	Version        int64  `json:"version"`
}

func toResponse(p Product) productResponse {
	return productResponse{SKU: p.SKU, Name: p.Name, PriceCents: p.PriceCents, StockAvailable: p.StockAvailable, Version: p.Version}
}

type createRequest struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	PriceCents *int64 `json:"price_cents"`
	Stock      *int   `json:"stock"`
}

func (h handlers) create(c echo.Context) error {
	var req createRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	if req.PriceCents == nil || req.Stock == nil {
		return problem.New(problem.Invalid, "price_cents and stock are required")
	}
	p := Product{SKU: req.SKU, Name: req.Name, PriceCents: *req.PriceCents, StockAvailable: *req.Stock}
	if err := p.Validate(); err != nil {
		return err
	}
	p, err := h.store.Create(c.Request().Context(), p)
	if err != nil {
		return err
	}
	setETag(c, p)
	c.Response().Header().Set(echo.HeaderLocation, "/v1/products/"+p.SKU)
	return httpx.JSON(c, http.StatusCreated, toResponse(p))
}

func (h handlers) list(c echo.Context) error {
	limit, err := httpx.Limit(c)
	if err != nil {
		return err
	}
	items, next, err := h.store.List(c.Request().Context(), c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, httpx.NewPage(items, next, toResponse))
}

func (h handlers) get(c echo.Context) error {
	sku, err := skuParam(c)
	if err != nil {
		return err
	}
	p, err := h.store.Get(c.Request().Context(), sku)
	if err != nil {
		return err
	}
	setETag(c, p)
	// The client holds this version already: tell it so, without the body.
	if httpx.NoneMatch(c.Request().Header.Values("If-None-Match"), c.Response().Header().Get("ETag")) {
		return c.NoContent(http.StatusNotModified)
	}
	return httpx.JSON(c, http.StatusOK, toResponse(p))
}

type patchRequest struct {
	Name       *string `json:"name"`
	PriceCents *int64  `json:"price_cents"`
}

func (h handlers) update(c echo.Context) error {
	sku, err := skuParam(c)
	if err != nil {
		return err
	}
	// Layer 3 at the edge: the client proves which version it edits.
	version, err := ifMatch(c)
	if err != nil {
		return err
	}
	var req patchRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	patch := Patch{Name: req.Name, PriceCents: req.PriceCents}
	if err := patch.Validate(); err != nil {
		return err
	}
	p, err := h.store.Update(c.Request().Context(), sku, version, patch)
	if err != nil {
		return err
	}
	setETag(c, p)
	return httpx.JSON(c, http.StatusOK, toResponse(p))
}

type restockRequest struct {
	Quantity *int `json:"quantity"`
}

func (h handlers) restock(c echo.Context) error {
	sku, err := skuParam(c)
	if err != nil {
		return err
	}
	var req restockRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	if req.Quantity == nil {
		return problem.New(problem.Invalid, "quantity: required")
	}
	if err := ValidateRestock(*req.Quantity); err != nil {
		return err
	}
	p, err := h.store.Restock(c.Request().Context(), sku, *req.Quantity, idempotency.RecordFrom(c.Request().Context()))
	if err != nil {
		return err
	}
	// The bytes stored with the key in the restock's transaction: a
	// replay is the same.
	return idempotency.Send(c, restocked(p))
}

// restocked is the answer to a restock, the one its Idempotency-Key
// stores and replays.
func restocked(p Product) idempotency.Answer {
	return idempotency.Answer{Status: http.StatusOK, ETag: etag(p), Body: toResponse(p)}
}

func skuParam(c echo.Context) (string, error) {
	sku := c.Param("sku")
	if !ValidSKU(sku) {
		return "", problem.Errorf(problem.NotFound, "product %s not found", sku)
	}
	return sku, nil
}

func setETag(c echo.Context, p Product) { c.Response().Header().Set("ETag", etag(p)) }

// etag is the product's version as an entity tag.
func etag(p Product) string { return `"` + strconv.FormatInt(p.Version, 10) + `"` }

// ifMatch reads the version a PATCH claims to edit. Without it the edit
// could overwrite a change the client never saw: 428, not a blind write.
func ifMatch(c echo.Context) (int64, error) {
	raw := strings.TrimSpace(c.Request().Header.Get("If-Match"))
	if raw == "" {
		return 0, problem.New(problem.PreconditionRequired, `If-Match: required, give the ETag of the product you read, like "3"`)
	}
	// A strong comparison (RFC 9110 §13.1.1): a weak W/"3" or * never matches.
	quoted := len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"'
	v, err := strconv.ParseInt(strings.Trim(raw, `"`), 10, 64)
	if !quoted || err != nil || v < 1 {
		return 0, problem.Errorf(problem.VersionMismatch, "If-Match: %s is not a version of this product", raw)
	}
	return v, nil
}
