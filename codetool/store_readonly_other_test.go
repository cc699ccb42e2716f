//go:build !linux

package codetool_test

import "errors"

// seeReadOnly: the read-only test runs on Linux.
func seeReadOnly(string) error { return errors.New("skip: Linux only") }
