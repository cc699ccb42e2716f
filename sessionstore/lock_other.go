//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package sessionstore

import (
	"errors"
	"os"
	"runtime"
)

func lockSupported() error {
	return errors.New("sessionstore: the directory store needs file locks (flock), which " + runtime.GOOS + " lacks here: use a NATS store")
}

func lockFile(*os.File) error { return lockSupported() }
