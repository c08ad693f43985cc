package testenv

import (
	"errors"
	"os"
	"path/filepath"
)

// RepoRoot is the repository's top folder, the module's: the nearest
// folder holding go.mod at or above the working directory (a test's is
// its package's). It is found from there, not from this file's path,
// which a build with -trimpath (make's GOFLAGS) does not record.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}
