package app

import (
	"os"

	"github.com/labstack/echo/v4"
)

// replicaName is what X-Served-By says: SHOP_REPLICA_NAME, else the host's
// name.
func replicaName(configured string) string {
	if configured != "" {
		return configured
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "unknown"
}

// servedBy names the replica in every answer, so a client behind the
// load balancer (the race lab's page) can show which one served it.
func servedBy(name string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set("X-Served-By", name)
			return next(c)
		}
	}
}
