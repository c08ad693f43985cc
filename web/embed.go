// Package web is the shop in a browser: plain HTML, CSS and JavaScript
// modules, no build step, embedded in the binary and served by every
// replica at / (the shop) and /web/… (the other pages and the assets).
// The pages use only the public REST API (docs/API.md); the race lab
// also uses the demo-only /v1/lab routes.
package web

import (
	"embed"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"path"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

//go:embed *.html *.css *.js
var files embed.FS

// Register serves the shop at GET / and the files at GET /web/{file}.
func Register(e *echo.Echo) {
	e.GET("/", func(c echo.Context) error { return serve(c, "index.html") })
	e.GET("/web/:file", func(c echo.Context) error { return serve(c, c.Param("file")) })
}

func serve(c echo.Context, name string) error {
	b, err := fs.ReadFile(files, name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) || name == "" {
		return problem.New(problem.NotFound, "no such page")
	}
	if err != nil {
		return err
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	h := c.Response().Header()
	// The pages load nothing from elsewhere: no fonts, no CDNs.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	return c.Blob(http.StatusOK, ct, b)
}
