// Package cache holds what every part of fumehood that keeps files in its
// cache directory shares: where that directory is, how a preparation
// reports its progress, and the error of a download or package that does
// not match its pinned hash.
package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DirEnv is the environment variable that overrides the default cache
// directory.
const DirEnv = "FUMEHOOD_CACHE_DIR"

// Dir returns the directory fumehood caches guests in: dir if it is not
// empty, else $FUMEHOOD_CACHE_DIR, else "fumehood" in the user's cache
// directory (os.UserCacheDir).
func Dir(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	if d := os.Getenv(DirEnv); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("fumehood: no cache directory: set %s: %w", DirEnv, err)
	}
	return filepath.Join(base, "fumehood"), nil
}

// ErrIntegrity reports a download or a cached file that does not match
// its pinned hash.
var ErrIntegrity = errors.New("integrity check failed")

// Progress reports how the building or preparation of a guest proceeds.
type Progress struct {
	// Stage is "fetch", "build" or "prepare".
	Stage string
	// Step names the step of the stage.
	Step string
	// Done and Total count the stage's steps (or bytes, where a stage
	// says so).
	Done, Total int64
}
