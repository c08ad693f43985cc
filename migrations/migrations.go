// Package migrations embeds the SQL migrations into the binary, so one file
// carries the schema it needs. Files follow golang-migrate's
// NNNNNN_name.up.sql / .down.sql convention.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
