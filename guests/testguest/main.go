//go:build wasip1

// Command testguest is a small WASI program, built with GOOS=wasip1 at test
// time, that exercises what a sandbox offers any WASI guest. Its first
// argument picks what it does:
//
//	args          print each argument on its own line
//	env           print the environment, sorted, one KEY=VALUE a line
//	exit N        exit with status N
//	cat           copy stdin to stdout
//	spin          loop forever
//	write N       write N bytes of 'x' to stdout
//	ls DIR        list a directory
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testguest MODE [ARGS...]")
		os.Exit(2)
	}
	switch mode, rest := os.Args[1], os.Args[2:]; mode {
	case "args":
		for _, a := range rest {
			fmt.Println(a)
		}
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			fmt.Println(e)
		}
	case "exit":
		n, _ := strconv.Atoi(rest[0])
		os.Exit(n)
	case "cat":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "spin":
		for i := 0; ; i++ {
			if i < 0 {
				fmt.Println(i)
			}
		}
	case "write":
		n, _ := strconv.Atoi(rest[0])
		os.Stdout.Write(bytes.Repeat([]byte("x"), n))
	case "ls":
		entries, err := os.ReadDir(rest[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, e := range entries {
			fmt.Println(e.Name())
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}
