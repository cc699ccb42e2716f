//go:build !linux

package main

// hugeHeap asks for huge pages where the kernel lets a process ask
// (hugeheap_linux.go); here it does nothing.
func hugeHeap() bool { return false }
