// Package inventory keeps products and their stock.
//
// The pattern it teaches is the atomic conditional update. Stock is a
// counter, and a counter must never be read into the program, changed and
// written back: two buyers would both read 1 and both write 0. Instead the
// database does the check and the change in one statement,
//
//	UPDATE products SET stock_available = stock_available - $2
//	WHERE sku = $1 AND stock_available >= $2
//
// and a row that does not come back means "not enough". The CHECK
// (stock_available >= 0) behind it (constraint products_stock_nonnegative)
// is the backstop that holds even if a code path forgets the condition.
//
// No lock guards stock. A lock on a hot SKU would serialise every buyer in
// a flash sale through Redis as well as through the row; the row lock that
// PostgreSQL takes for the UPDATE already serialises them, for free.
//
// Product attributes an admin edits (name, price) are guarded differently:
// by a version column, exposed as ETag, and checked with If-Match, so two
// admins cannot silently overwrite each other's edit.
package inventory
