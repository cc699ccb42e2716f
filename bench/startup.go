package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

const tiny = "print(1)"

// firstOutput runs a command and returns how long it took to write its first
// byte to stdout.
func firstOutput(name string, args ...string) (time.Duration, error) {
	return firstOutputCmd(exec.Command(name, args...))
}

func firstOutputCmd(cmd *exec.Cmd) (time.Duration, error) {
	name := cmd.Path
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	r := bufio.NewReader(out)
	_, rerr := r.ReadByte()
	d := time.Since(start)
	io.Copy(io.Discard, r)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if rerr != nil {
		return 0, fmt.Errorf("%s printed nothing", name)
	}
	return d, nil
}

// firstWrite records when a run's first output arrives.
type firstWrite struct {
	once sync.Once
	at   time.Time
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { f.at = time.Now() })
	return len(p), nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// coldStart times each way of running print(1) from nothing to first
// output, alternating between them, as ratios to native python3.
func (b *bench) coldStart(ctx context.Context) ([]Timing, error) {
	type peer struct {
		name, note string
		run        func() (time.Duration, error)
	}
	peers := []peer{
		{name: "native python3 -c", run: func() (time.Duration, error) { return firstOutput(b.python, "-c", tiny) }},
		{name: "fumehood CLI: fumehood run -c", note: "warm guest cache", run: func() (time.Duration, error) {
			return firstOutput(b.fumehoodBin, "run", "-c", tiny)
		}},
	}
	if b.bwrap != "" {
		peers = append(peers, peer{name: "native python3 inside bwrap", note: "all namespaces unshared, read-only /",
			run: func() (time.Duration, error) {
				return firstOutput(b.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
					"--unshare-all", "--die-with-parent", "--new-session", b.python, "-c", tiny)
			}})
	}
	if b.runner != "" {
		peers = append(peers, peer{name: "Pyodide on Node.js", note: "loadPyodide + runPython",
			run: func() (time.Duration, error) { return b.pyodide("run", tiny) }})
	}
	peers = append(peers, peer{name: "fumehood in-process: new sandbox + run", note: "guest compiled once per process",
		run: func() (time.Duration, error) { d, _, err := b.newSandboxRun(ctx); return d, err }})
	peers = append(peers, peer{name: "fumehood in-process: new session + run", note: "a fresh interpreter from the base image",
		run: func() (time.Duration, error) { d, _, err := b.newSessionRun(ctx); return d, err }})

	samples := make([][]float64, len(peers))
	for i := range b.opts.ColdReps {
		b.log("cold start %d/%d", i+1, b.opts.ColdReps)
		for j, p := range peers {
			d, err := p.run()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			samples[j] = append(samples[j], ms(d))
		}
	}
	var rows []Timing
	base := median(samples[0])
	for j, p := range peers {
		m := median(samples[j])
		rows = append(rows, Timing{Name: p.name, Note: p.note, Median: m, Ratio: div(m, base), Samples: samples[j]})
	}
	return rows, nil
}

func (b *bench) pyodide(args ...string) (time.Duration, error) {
	c := exec.Command("node", append([]string{b.runner}, args...)...)
	c.Env = append(c.Environ(), "PYODIDE_DIR="+b.pyodideDir)
	return firstOutputCmd(c)
}

// newSandboxRun opens a sandbox, runs print(1) in it and closes it: what a
// caller does for a one-shot run. It returns the time to first output and
// to the end.
func (b *bench) newSandboxRun(ctx context.Context) (first, total time.Duration, err error) {
	return timedTiny(ctx, func() (runner, error) {
		sb, err := b.guest.NewSandbox(nil)
		return sandboxRunner{sb}, err
	})
}

// newSessionRun starts a session (a fresh interpreter from the base image),
// runs print(1) in it and closes it. It returns the time to first output
// and to the end.
func (b *bench) newSessionRun(ctx context.Context) (first, total time.Duration, err error) {
	return timedTiny(ctx, func() (runner, error) { return b.guest.NewSession(ctx, nil) })
}

// runner is what a sandbox and a session have in common.
type runner interface {
	Run(ctx context.Context, code string, cfg *sandbox.RunOptions) (*sandbox.Result, error)
	Close() error
}

// sandboxRunner is a sandbox as a runner: its runs without arguments.
type sandboxRunner struct{ *sandbox.Sandbox }

func (s sandboxRunner) Run(ctx context.Context, code string, cfg *sandbox.RunOptions) (*sandbox.Result, error) {
	return s.Sandbox.Run(ctx, code, cfg)
}

// timedTiny opens a runner, runs print(1) in it and closes it, and returns
// the time to first output and to the end, from before the open.
func timedTiny(ctx context.Context, open func() (runner, error)) (first, total time.Duration, err error) {
	var fw firstWrite
	start := time.Now()
	r, err := open()
	if err != nil {
		return 0, 0, err
	}
	res, err := r.Run(ctx, tiny, &sandbox.RunOptions{Stdout: &fw})
	r.Close()
	if err != nil {
		return 0, 0, err
	}
	if string(res.Stdout) != "1\n" {
		return 0, 0, fmt.Errorf("unexpected output %q", res.Stdout)
	}
	return fw.at.Sub(start), time.Since(start), nil
}

// sessionRows measures sessions: a new one, a run round trip, snapshot,
// resume and fork of a small session, as ratios to a one-shot round trip.
func (b *bench) sessionRows(ctx context.Context, base float64) ([]Timing, error) {
	var first, total, rt, snap, resume, fork []float64
	var size int
	s, err := b.guest.NewSession(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if _, err := s.Run(ctx, "import json\nx = 0\ndata = {'k%d' % i: i for i in range(1000)}", nil); err != nil {
		return nil, err
	}
	for range b.opts.WarmReps {
		f, t, err := b.newSessionRun(ctx)
		if err != nil {
			return nil, err
		}
		first, total = append(first, ms(f)), append(total, ms(t))
		start := time.Now()
		if _, err := s.Run(ctx, "x += 1", nil); err != nil {
			return nil, err
		}
		rt = append(rt, ms(time.Since(start)))
		var buf bytes.Buffer
		start = time.Now()
		if err := s.Snapshot(&buf); err != nil {
			return nil, err
		}
		snap, size = append(snap, ms(time.Since(start))), buf.Len()
		start = time.Now()
		r, err := b.guest.ResumeSession(ctx, &buf, nil)
		if err != nil {
			return nil, err
		}
		resume = append(resume, ms(time.Since(start)))
		r.Close()
		start = time.Now()
		f2, err := s.Fork(ctx)
		if err != nil {
			return nil, err
		}
		fork = append(fork, ms(time.Since(start)))
		f2.Close()
	}
	row := func(name string, v []float64) Timing {
		m := median(v)
		return Timing{Name: name, Median: m, Ratio: div(m, base), Samples: v}
	}
	return []Timing{
		row("new session + run print(1), to first output", first),
		row("new session + run print(1) + close, round trip", total),
		row("run x += 1 in a live session, round trip", rt),
		row(fmt.Sprintf("snapshot of a small session (%.2f MB)", float64(size)/1e6), snap),
		row("resume that snapshot in-process", resume),
		row("fork that session", fork),
	}, nil
}

// warm measures runs inside one process that holds the compiled guest.
func (b *bench) warm(ctx context.Context, quick bool) ([]Timing, error) {
	var first, total, held []float64
	sb, err := b.guest.NewSandbox(nil)
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	for i := range b.opts.WarmReps {
		if i%5 == 0 {
			b.log("warm %d/%d", i+1, b.opts.WarmReps)
		}
		f, t, err := b.newSandboxRun(ctx)
		if err != nil {
			return nil, err
		}
		first, total = append(first, ms(f)), append(total, ms(t))
		start := time.Now()
		if _, err := sb.Run(ctx, tiny, nil); err != nil {
			return nil, err
		}
		held = append(held, ms(time.Since(start)))
	}
	base := median(total)
	rows := []Timing{
		{Name: "new sandbox + run print(1), to first output", Median: median(first), Samples: first},
		{Name: "new sandbox + run print(1) + close, round trip", Median: base, Ratio: 1, Samples: total},
		{Name: "run print(1) in a sandbox held between runs, round trip", Median: median(held), Ratio: div(median(held), base), Samples: held},
	}
	b.log("sessions")
	srows, err := b.sessionRows(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	rows = append(rows, srows...)
	dur := 5 * time.Second
	if quick {
		dur = time.Second
	}
	for _, workers := range []int{1, 2} {
		b.log("throughput with %d workers for %s", workers, dur)
		rate, err := b.throughput(ctx, workers, dur)
		if err != nil {
			return nil, err
		}
		rows = append(rows, Timing{Name: fmt.Sprintf("tiny runs per second, %d goroutines (new sandbox + print(1) each)", workers),
			Median: rate, Unit: "runs/s", Samples: []float64{rate}})
	}
	return rows, nil
}

// throughput runs one-shot print(1) runs on workers goroutines for dur and
// returns the runs completed per second.
func (b *bench) throughput(ctx context.Context, workers int, dur time.Duration) (float64, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(dur)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := b.guest.Run(ctx, tiny, nil); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}
