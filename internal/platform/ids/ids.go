// Package ids is the one spelling of the service's ids: a UUID in the
// lower-case 8-4-4-4-12 form every answer uses.
//
// uuid.Parse and PostgreSQL also read upper case, braces, no dashes and
// urn:uuid:, but a lock keyed on the raw text would then hold one order
// (one like, one seat hold) under several names. So every other spelling
// names no resource: the HTTP edge answers it 404 (httpx.ParamID), and the
// services refuse it again, so that no caller can make one resource answer
// to two lock keys. Lock keys, SQL and answers all see the same string.
package ids

import "github.com/google/uuid"

// Valid reports whether id is an id in its one spelling.
func Valid(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}
