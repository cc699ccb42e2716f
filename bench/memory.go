package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// Kinds of idle sandbox whose memory is measured.
const (
	// memSandbox is what a caller holds between runs today: a Sandbox, which
	// is its filesystem; every run instantiates afresh.
	memSandbox = "sandbox"
	// memLive is a Sandbox with a live instance: a run whose interpreter
	// has started and is blocked reading stdin. It is what an idle session
	// will hold.
	memLive = "live"
	// memSession is an idle session after one run; memHibernated the same
	// session hibernated (only its pages that differ from the base image).
	memSession    = "session"
	memHibernated = "hibernated"
)

// memory measures each kind at each N in a fresh child process, so that
// one measurement's garbage does not count in the next.
func (b *bench) memory(ns []int) ([]MemRow, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var rows []MemRow
	kinds := []string{memSandbox, memLive, memSession, memHibernated}
	for _, kind := range kinds {
		for _, n := range ns {
			b.log("memory: %d idle %s", n, kind)
			out, err := exec.Command(self, "-memory-child", kind, "-n", strconv.Itoa(n)).Output()
			if err != nil {
				return nil, fmt.Errorf("memory %s %d: %w", kind, n, err)
			}
			var growth int64
			if err := json.Unmarshal(out, &growth); err != nil {
				return nil, fmt.Errorf("memory %s %d: %w: %s", kind, n, err, out)
			}
			mb := float64(growth) / (1 << 20)
			name := map[string]string{
				memSandbox:    "Sandbox (its filesystem; runs instantiate afresh)",
				memLive:       "Sandbox + live interpreter blocked on stdin",
				memSession:    "Session, idle after one run",
				memHibernated: "Session, hibernated after one run",
			}[kind]
			rows = append(rows, MemRow{Kind: name, N: n, TotalMB: mb, PerMB: mb / float64(n)})
		}
	}
	return rows, nil
}

// rss returns the process's resident set size in bytes after a garbage
// collection that returns freed memory to the OS.
func rss() (int64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}

// readyWriter signals once the guest has written anything.
type readyWriter struct {
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ready) })
	return len(p), nil
}

// memoryChild holds n idle sandboxes of kind and prints how much the
// process's resident memory grew, in bytes, as JSON. The baseline is taken
// after the guest is compiled and one run has been made, so it holds the
// compiled code and the runtime's warm state.
func memoryChild(ctx context.Context, kind string, n int) error {
	if kind == memSession || kind == memHibernated {
		return sessionMemoryChild(ctx, kind == memHibernated, n)
	}
	g, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer g.Close()
	if _, err := g.Run(ctx, tiny, nil); err != nil {
		return err
	}
	base, err := rss()
	if err != nil {
		return err
	}
	var sbs []*sandbox.Sandbox
	var stdins []*io.PipeWriter
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		sb, err := g.NewSandbox(&sandbox.Config{Limits: sandbox.Limits{Timeout: -1}}) // held until measured
		if err != nil {
			return err
		}
		sbs = append(sbs, sb)
		if kind != memLive {
			continue
		}
		pr, pw := io.Pipe()
		stdins = append(stdins, pw)
		rw := &readyWriter{ready: make(chan struct{})}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sb.Run(ctx, "import sys; print('ready'); sys.stdin.buffer.read(1)",
				&sandbox.RunOptions{Stdin: pr, Stdout: rw})
			if err != nil {
				errs <- err
			}
		}()
		select {
		case <-rw.ready:
		case err := <-errs:
			return err
		case <-time.After(time.Minute):
			return fmt.Errorf("the guest did not start within a minute")
		}
	}
	held, err := rss()
	if err != nil {
		return err
	}
	for _, w := range stdins {
		w.Write([]byte("x"))
		w.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	for _, sb := range sbs {
		sb.Close()
	}
	return json.NewEncoder(os.Stdout).Encode(held - base)
}

// sessionMemoryChild holds n idle sessions, each after one run, hibernated
// or not, and prints the growth of resident memory as memoryChild does.
func sessionMemoryChild(ctx context.Context, hibernate bool, n int) error {
	g, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer g.Close()
	warm, err := g.NewSession(ctx, nil) // builds or loads the base image
	if err != nil {
		return err
	}
	if _, err := warm.Run(ctx, tiny, nil); err != nil {
		return err
	}
	warm.Close()
	base, err := rss()
	if err != nil {
		return err
	}
	var all []*sandbox.Session
	for range n {
		s, err := g.NewSession(ctx, nil)
		if err != nil {
			return err
		}
		all = append(all, s)
		if _, err := s.Run(ctx, "x = [i for i in range(1000)]", nil); err != nil {
			return err
		}
		if hibernate {
			if err := s.Hibernate(); err != nil {
				return err
			}
		}
	}
	held, err := rss()
	if err != nil {
		return err
	}
	for _, s := range all {
		s.Close()
	}
	return json.NewEncoder(os.Stdout).Encode(held - base)
}
