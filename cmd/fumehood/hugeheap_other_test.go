//go:build !linux

package main

// hugeHeapChild is hugeheap_linux_test.go's child process, which only
// Linux starts.
func hugeHeapChild() {}
