// Command bench measures fumehood against its peers and against native
// CPython, and prints medians and ratios as Markdown tables. `make bench`
// installs the peers (bench/setup.sh) and runs it:
//
//	go run ./bench -pyodide DIR -markdown bench/README.md -json bench/results.json
//
// Every ratio compares numbers measured in the same run, alternating between
// the things compared, so that a noisy machine shifts both sides alike.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/sandbox"
)

//go:embed pyodide.js
var pyodideRunner []byte

type bench struct {
	fumehoodBin string // the CLI
	python      string // native python3, resolved past shims
	pyodideDir  string // the npm package, or "" to skip
	runner      string // pyodide.js written to a temp dir
	bwrap       string // "" to skip
	guest       *sandbox.Guest
	opts        RunOptions
	log         func(format string, args ...any)
}

func main() {
	var (
		bin      = flag.String("fumehood", "bin/fumehood", "the fumehood command line to time")
		pyodide  = flag.String("pyodide", "", "directory of the npm package pyodide (empty: skip Pyodide)")
		mdPath   = flag.String("markdown", "", "write the tables into this Markdown file, between its `make bench` markers")
		jsonPath = flag.String("json", "", "write the report as JSON to this file")
		quick    = flag.Bool("quick", false, "one or two repetitions of everything: a smoke run, not a measurement")
		only     = flag.String("only", "cold,warm,cpu,memory", "comma-separated parts to run")
		memChild = flag.String("memory-child", "", "internal: measure N idle sandboxes of this kind (sandbox|live|session|hibernated)")
		memN     = flag.Int("n", 1, "internal: with -memory-child, how many")
	)
	flag.Parse()
	ctx := context.Background()
	if *memChild != "" {
		if err := memoryChild(ctx, *memChild, *memN); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, *bin, *pyodide, *mdPath, *jsonPath, *quick, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, pyodideDir, mdPath, jsonPath string, quick bool, only string) error {
	b := &bench{fumehoodBin: bin, pyodideDir: pyodideDir, opts: RunOptions{ColdReps: 11, WarmReps: 21, CPUReps: 5},
		log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench: "+f+"\n", a...) }}
	if quick {
		b.opts = RunOptions{ColdReps: 1, WarmReps: 3, CPUReps: 1}
	}
	var err error
	if b.python, err = nativePython(); err != nil {
		return err
	}
	if p, err := exec.LookPath("bwrap"); err == nil {
		b.bwrap = p
	}
	if pyodideDir != "" {
		dir, err := os.MkdirTemp("", "fumehood-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b.runner = filepath.Join(dir, "pyodide.js")
		if err := os.WriteFile(b.runner, pyodideRunner, 0o644); err != nil {
			return err
		}
	}
	b.guest, err = sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer b.guest.Close()

	rep := &Report{Started: time.Now(), Config: b.opts, Machine: b.machine()}
	rep.Machine.LoadAvg = loadavg()
	rep.Noise = "The machine is shared (other builds and tests ran alongside): compare ratios, not absolute times."
	parts := map[string]bool{}
	for _, p := range strings.Split(only, ",") {
		parts[strings.TrimSpace(p)] = true
	}
	if parts["cold"] {
		if rep.Cold, err = b.coldStart(ctx); err != nil {
			return err
		}
	}
	if parts["warm"] {
		if rep.Warm, err = b.warm(ctx, quick); err != nil {
			return err
		}
	}
	if parts["cpu"] {
		if rep.CPU, err = b.cpu(ctx); err != nil {
			return err
		}
	}
	if parts["memory"] {
		ns := []int{1, 10, 100}
		if quick {
			ns = []int{1, 2}
		}
		if rep.Memory, err = b.memory(ns); err != nil {
			return err
		}
	}
	rep.Machine.LoadEnd = loadavg()
	rep.Notes = append(rep.Notes,
		"Native python3 is the machine's own CPython ("+rep.Machine.Python+"); fumehood's guest runs CPython 3.13.5, Pyodide CPython 3.12.",
		"fumehood's CPU rows use the built guest as prepared: fuel-metered, with an unlimited budget.")

	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	os.Stdout.Write(md.Bytes())
	if mdPath != "" {
		doc, err := os.ReadFile(mdPath)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.WriteFile(mdPath, []byte(splice(string(doc), md.String())), 0o644); err != nil {
			return err
		}
	}
	if jsonPath != "" {
		var j bytes.Buffer
		if err := rep.WriteJSON(&j); err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, j.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// nativePython finds the real python3 executable: a shim (pyenv) in front
// of it would add its own start-up to the cold-start row.
func nativePython() (string, error) {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("native python3 is needed as the baseline: %w", err)
	}
	return filepath.EvalSymlinks(strings.TrimSpace(string(out)))
}

func (b *bench) machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Guest: "CPython " + cpython.PythonVersion + " (fumehood guest build)"}
	if cpuinfo, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(cpuinfo), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(k))
	}
	if out, err := exec.Command(b.python, "--version").Output(); err == nil {
		m.Python = strings.TrimSpace(string(out))
	}
	if b.pyodideDir != "" {
		if out, err := exec.Command("node", "--version").Output(); err == nil {
			m.Node = strings.TrimSpace(string(out))
		}
		if pj, err := os.ReadFile(filepath.Join(b.pyodideDir, "package.json")); err == nil {
			if _, v, ok := strings.Cut(string(pj), `"version": "`); ok {
				m.Pyodide, _, _ = strings.Cut(v, `"`)
			}
		}
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
