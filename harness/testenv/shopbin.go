package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var shopBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// ShopBinary builds ./cmd/shop once for the test process and returns its
// path, for the tests that run the shop as processes of its own. It is
// built with the race detector when the test binary is (go test -race):
// the packages it needs are then those the test itself was built from,
// already in the build cache, and the replicas' own races are reported.
// The binary is removed when the process ends through Main.
func ShopBinary(t testing.TB) string {
	t.Helper()
	shopBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "shop-bin-")
		if err != nil {
			shopBin.err = err
			return
		}
		shopBin.dir = dir
		path := filepath.Join(dir, "shop")
		args := []string{"build", "-o", path}
		if raceEnabled {
			args = append(args, "-race")
		}
		// The go that built this test, else the one on the PATH.
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		cmd := exec.Command(goBin, append(args, "./cmd/shop")...)
		cmd.Dir, err = RepoRoot()
		if err != nil {
			shopBin.err = err
			return
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			shopBin.err = errors.New(err.Error() + "\n" + string(out))
			return
		}
		shopBin.path = path
	})
	if shopBin.err != nil {
		t.Fatalf("build the shop: %v", shopBin.err)
	}
	return shopBin.path
}
