package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"sort"

	"github.com/shop-example/shop/migrations"
)

// migrationsHash names the template after the migrations it was built from,
// so a changed migration gets a new template instead of a stale one.
func migrationsHash() string {
	h := sha256.New()
	names, _ := fs.Glob(migrations.FS, "*.sql")
	sort.Strings(names)
	for _, n := range names {
		b, _ := fs.ReadFile(migrations.FS, n)
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
