// Package docs holds the project's documents, the tests that keep them
// true, and the API contract in the form programs read: openapi.yaml,
// embedded, so that what GET /openapi.yaml serves and what the tests
// validate against are the very bytes in this directory.
package docs

import _ "embed"

//go:embed openapi.yaml
var openAPI string

// OpenAPI returns the bytes of docs/openapi.yaml.
func OpenAPI() []byte { return []byte(openAPI) }
