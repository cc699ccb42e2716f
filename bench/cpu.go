package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fumehood/fumehood/bench/internal/cpuset"
	"github.com/fumehood/fumehood/sandbox"
)

// cpu runs the CPU set in native python3, fumehood and Pyodide, one round
// after another (each round runs every program once in each), and returns
// the medians and ratios.
func (b *bench) cpu(ctx context.Context) ([]CPURow, error) {
	native := map[string][]float64{}
	fh := map[string][]float64{}
	pyo := map[string][]float64{}
	var batch string
	if b.runner != "" {
		type job struct {
			Name string `json:"name"`
			Code string `json:"code"`
		}
		var jobs []job
		for _, p := range cpuset.Programs {
			jobs = append(jobs, job{p.Name, cpuset.Harness(p)})
		}
		data, err := json.Marshal(jobs)
		if err != nil {
			return nil, err
		}
		batch = filepath.Join(filepath.Dir(b.runner), "cpu.json")
		if err := os.WriteFile(batch, data, 0o644); err != nil {
			return nil, err
		}
	}
	for round := range b.opts.CPUReps {
		b.log("cpu round %d/%d", round+1, b.opts.CPUReps)
		for _, p := range cpuset.Programs {
			out, err := exec.Command(b.python, "-c", cpuset.Harness(p)).Output()
			if err != nil {
				return nil, fmt.Errorf("native %s: %w", p.Name, err)
			}
			s, err := seconds(string(out))
			if err != nil {
				return nil, fmt.Errorf("native %s: %w", p.Name, err)
			}
			native[p.Name] = append(native[p.Name], s*1000)

			res, err := b.guest.Run(ctx, cpuset.Harness(p), &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: -1}})
			if err != nil {
				return nil, fmt.Errorf("fumehood %s: %w\n%s", p.Name, err, res.Stderr)
			}
			if s, err = seconds(string(res.Stdout)); err != nil {
				return nil, fmt.Errorf("fumehood %s: %w", p.Name, err)
			}
			fh[p.Name] = append(fh[p.Name], s*1000)
		}
		if batch != "" {
			c := exec.Command("node", b.runner, "batch", batch)
			c.Env = append(c.Environ(), "PYODIDE_DIR="+b.pyodideDir)
			c.Stderr = os.Stderr
			out, err := c.Output()
			if err != nil {
				return nil, fmt.Errorf("pyodide: %w", err)
			}
			var res map[string]string
			if err := json.Unmarshal(out, &res); err != nil {
				return nil, fmt.Errorf("pyodide: %w: %s", err, out)
			}
			for _, p := range cpuset.Programs {
				s, err := seconds(res[p.Name])
				if err != nil {
					return nil, fmt.Errorf("pyodide %s: %w", p.Name, err)
				}
				pyo[p.Name] = append(pyo[p.Name], s*1000)
			}
		}
	}
	var rows []CPURow
	for _, p := range cpuset.Programs {
		r := CPURow{Program: p.Name, What: p.What, Native: median(native[p.Name]), Fumehood: median(fh[p.Name]), Pyodide: median(pyo[p.Name])}
		r.VsNative, r.VsPyodide, r.PyoNative = div(r.Fumehood, r.Native), div(r.Fumehood, r.Pyodide), div(r.Pyodide, r.Native)
		rows = append(rows, r)
	}
	return rows, nil
}

// seconds parses the last line a harness printed.
func seconds(out string) (float64, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	s, err := strconv.ParseFloat(strings.TrimSpace(lines[len(lines)-1]), 64)
	if err != nil {
		return 0, fmt.Errorf("no timing in output %q", out)
	}
	return s, nil
}
