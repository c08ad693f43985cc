package likes

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
)

// Guards are the middleware the routes are protected with.
type Guards struct {
	User  echo.MiddlewareFunc // a registered user's bearer token
	Admin echo.MiddlewareFunc // the admin token
	// WriteLimit is the per-user limit on a user's writes (here: creating
	// a post). LikeLimit is the per-user limit on likes and unlikes, a
	// bucket of its own: likes come far more often than other writes, and
	// a user's liking spree must not use up the budget of their payment.
	// Both run after User, which names the user they count.
	WriteLimit echo.MiddlewareFunc
	LikeLimit  echo.MiddlewareFunc
}

// Register mounts the post and like routes on g (the /v1 group). Each
// route lists its protections where it is registered. The like routes
// take no Idempotency-Key: PUT and DELETE say the state they want, so a
// retry of either asks for what the first already made true, and layer 2
// answers it without writing anything.
func Register(g *echo.Group, svc *Service, guard Guards) {
	h := handlers{svc: svc}
	g.POST("/posts", h.create, guard.User, guard.WriteLimit)
	g.GET("/posts", h.list, guard.User)
	g.GET("/posts/:id", h.get, guard.User)
	g.PUT("/posts/:id/like", h.like, guard.User, guard.LikeLimit)
	g.DELETE("/posts/:id/like", h.unlike, guard.User, guard.LikeLimit)
	g.GET("/likes/reconciliation", h.reconcile, guard.Admin)
}

type handlers struct{ svc *Service }

// postResponse is the JSON of a post (API.md, "Likes").
type postResponse struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	LikeCount int64     `json:"like_count"`
	LikedByMe bool      `json:"liked_by_me"`
	AuthorID  string    `json:"author_id"`
	CreatedAt time.Time `json:"created_at"`
}

func toPostResponse(p Post) postResponse {
	return postResponse{ID: p.ID, Title: p.Title, LikeCount: p.LikeCount, LikedByMe: p.LikedByMe,
		AuthorID: p.AuthorID, CreatedAt: p.CreatedAt.UTC()}
}

// likeResponse is the JSON of a like or unlike.
type likeResponse struct {
	PostID    string `json:"post_id"`
	Liked     bool   `json:"liked"`
	LikeCount int64  `json:"like_count"`
}

type createRequest struct {
	Title string `json:"title"`
}

// noBody is the body of PUT and DELETE: nothing, or an empty object.
type noBody struct{}

func (h handlers) create(c echo.Context) error {
	var req createRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	post, err := h.svc.CreatePost(c.Request().Context(), p.UserID, req.Title)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/posts/"+post.ID)
	return httpx.JSON(c, http.StatusCreated, toPostResponse(post))
}

func (h handlers) list(c echo.Context) error {
	limit, err := httpx.Limit(c)
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	items, next, err := h.svc.Posts(c.Request().Context(), p.UserID, c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, httpx.NewPage(items, next, toPostResponse))
}

func (h handlers) get(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	post, err := h.svc.Post(c.Request().Context(), p.UserID, id)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, toPostResponse(post))
}

func (h handlers) like(c echo.Context) error { return h.set(c, Liked) }

func (h handlers) unlike(c echo.Context) error { return h.set(c, Unliked) }

func (h handlers) set(c echo.Context, want State) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	if err := httpx.Bind(c, &noBody{}); err != nil {
		return err
	}
	p, _ := auth.PrincipalFrom(c.Request().Context())
	r, err := h.svc.Set(c.Request().Context(), p.UserID, id, want)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, likeResponse{PostID: r.PostID, Liked: r.State == Liked, LikeCount: r.LikeCount})
}

// reconciliationResponse is the JSON of an on-demand reconciliation.
type reconciliationResponse struct {
	PostsChecked int           `json:"posts_checked"`
	DriftedPosts int           `json:"drifted_posts"`
	Drift        int64         `json:"drift"`
	Drifted      []driftedPost `json:"drifted"`
}

type driftedPost struct {
	PostID    string `json:"post_id"`
	LikeCount int64  `json:"like_count"`
	LikedRows int64  `json:"liked_rows"`
}

func (h handlers) reconcile(c echo.Context) error {
	r, err := h.svc.Reconcile(c.Request().Context())
	if err != nil {
		return err
	}
	out := reconciliationResponse{PostsChecked: r.Posts, DriftedPosts: r.Drifted, Drift: r.Drift, Drifted: []driftedPost{}}
	for _, t := range r.Listed {
		out.Drifted = append(out.Drifted, driftedPost{PostID: t.PostID, LikeCount: t.Counted, LikedRows: t.LikedRows})
	}
	return httpx.JSON(c, http.StatusOK, out)
}
