package auth

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Middleware authenticates requests.
type Middleware struct {
	store      *Store
	adminToken string
}

// NewMiddleware returns the auth middleware. An empty adminToken disables
// the admin routes: they answer 403 to everyone.
func NewMiddleware(store *Store, adminToken string) *Middleware {
	return &Middleware{store: store, adminToken: adminToken}
}

// User admits requests that carry a registered user's token.
func (m *Middleware) User(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, ok := bearer(c)
		if !ok {
			return ErrUnauthenticated
		}
		u, err := m.store.UserByToken(c.Request().Context(), token)
		if err != nil {
			return invalidToken(c, err)
		}
		setPrincipal(c, Principal{UserID: u.ID, Name: u.Name})
		return next(c)
	}
}

// Admin admits requests that carry the admin token. A user's token is
// authenticated but not allowed (403); no or an unknown token is 401. With
// no admin token configured the admin routes are off: 403 to everyone.
func (m *Middleware) Admin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if m.adminToken == "" {
			return problem.New(problem.Forbidden, "admin routes are disabled: SHOP_ADMIN_TOKEN is not set")
		}
		token, ok := bearer(c)
		if !ok {
			return ErrUnauthenticated
		}
		if equalTokens(token, m.adminToken) {
			setPrincipal(c, Principal{Name: AdminScope, Admin: true})
			return next(c)
		}
		if _, err := m.store.UserByToken(c.Request().Context(), token); err != nil {
			return invalidToken(c, err)
		}
		return problem.New(problem.Forbidden, "this route needs the admin token")
	}
}

// UserOrAdmin admits requests that carry a registered user's token or the
// admin token: for the routes that an order's owner and the operator both
// use (refunds). Which orders a user's request may touch is the flow's to
// say (their own; another's does not exist for them). With no admin token
// configured it is User.
func (m *Middleware) UserOrAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	user := m.User(next)
	return func(c echo.Context) error {
		if token, ok := bearer(c); ok && m.adminToken != "" && equalTokens(token, m.adminToken) {
			setPrincipal(c, Principal{Name: AdminScope, Admin: true})
			return next(c)
		}
		return user(c)
	}
}

// invalidToken passes on err; when it says the token sent is no user's,
// the challenge says so too (RFC 6750 §3.1). A request with no bearer token
// at all gets the plain challenge the error handler adds to every 401.
func invalidToken(c echo.Context, err error) error {
	if errors.Is(err, ErrUnauthenticated) {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, httpx.BearerChallenge+`, error="invalid_token"`)
	}
	return err
}

func setPrincipal(c echo.Context, p Principal) {
	c.SetRequest(c.Request().WithContext(WithPrincipal(c.Request().Context(), p)))
}

func bearer(c echo.Context) (string, bool) {
	scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != "" && len(token) <= 256
}

// Register mounts the user routes on g (the /v1 group). registerLimit
// is the per-address limit on registration (package ratelimit): the route
// needs no token, so the client's address is all there is to count.
func Register(g *echo.Group, store *Store, mw *Middleware, registerLimit echo.MiddlewareFunc) {
	h := handlers{store: store}
	g.POST("/users", h.create, registerLimit)
	g.GET("/me", h.me, mw.User)
}

type handlers struct{ store *Store }

type createUserRequest struct {
	Name string `json:"name"`
}

type userResponse struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Token string `json:"token,omitempty"`
}

func (h handlers) create(c echo.Context) error {
	var req createUserRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	u, token, err := h.store.CreateUser(c.Request().Context(), req.Name)
	if err != nil {
		return err
	}
	// The user is read at /v1/me, with the token shown here.
	c.Response().Header().Set(echo.HeaderLocation, "/v1/me")
	return httpx.JSON(c, http.StatusCreated, userResponse{ID: u.ID, Name: u.Name, Token: token})
}

func (h handlers) me(c echo.Context) error {
	p, _ := PrincipalFrom(c.Request().Context())
	return httpx.JSON(c, http.StatusOK, userResponse{ID: p.UserID, Name: p.Name})
}
