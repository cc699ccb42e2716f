package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is everything one `make bench` run measured. It is written as JSON
// and rendered as Markdown tables.
type Report struct {
	Machine Machine    `json:"machine"`
	Noise   string     `json:"noise"`
	Cold    []Timing   `json:"cold_start"`
	Warm    []Timing   `json:"warm"`
	CPU     []CPURow   `json:"cpu"`
	Memory  []MemRow   `json:"memory"`
	Notes   []string   `json:"notes,omitempty"`
	Started time.Time  `json:"started"`
	Config  RunOptions `json:"options"`
}

// Machine describes where the numbers were measured.
type Machine struct {
	CPUs    int    `json:"nproc"`
	CPU     string `json:"cpu"`
	Kernel  string `json:"kernel"`
	Go      string `json:"go"`
	Python  string `json:"native_python"`
	Node    string `json:"node,omitempty"`
	Pyodide string `json:"pyodide,omitempty"`
	Guest   string `json:"guest"`
	LoadAvg string `json:"loadavg_at_start"`
	LoadEnd string `json:"loadavg_at_end"`
}

// RunOptions are the repetition counts used.
type RunOptions struct {
	ColdReps int `json:"cold_reps"`
	WarmReps int `json:"warm_reps"`
	CPUReps  int `json:"cpu_reps"`
}

// Timing is one row of the start-up tables: the median of Samples, and its
// ratio to the table's baseline (0 when there is none).
type Timing struct {
	Name    string    `json:"name"`
	Median  float64   `json:"median_ms"`
	Ratio   float64   `json:"ratio,omitempty"`
	Unit    string    `json:"unit,omitempty"` // "ms" unless set
	Samples []float64 `json:"samples"`
	Note    string    `json:"note,omitempty"`
}

// CPURow is one program of the CPU set: medians in milliseconds of the
// time run() took inside each interpreter.
type CPURow struct {
	Program   string  `json:"program"`
	What      string  `json:"what"`
	Native    float64 `json:"native_ms"`
	Fumehood  float64 `json:"fumehood_ms"`
	Pyodide   float64 `json:"pyodide_ms,omitempty"`
	VsNative  float64 `json:"fumehood_over_native"`
	VsPyodide float64 `json:"fumehood_over_pyodide,omitempty"`
	PyoNative float64 `json:"pyodide_over_native,omitempty"`
}

// MemRow is the resident memory held by N idle sandboxes of one kind.
type MemRow struct {
	Kind    string  `json:"kind"`
	N       int     `json:"n"`
	TotalMB float64 `json:"rss_growth_mb"`
	PerMB   float64 `json:"per_sandbox_mb"`
}

// geomean is the geometric mean of the positive values in v.
func geomean(v []float64) float64 {
	var s float64
	n := 0
	for _, x := range v {
		if x > 0 {
			s += ln(x)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return exp(s / float64(n))
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

func num(v float64) string {
	switch {
	case v == 0:
		return "—"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratio(v float64) string {
	if v == 0 {
		return "—"
	}
	return num(v) + "x"
}

type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.head, " | "))
	sep := make([]string, len(t.head))
	for i := range sep {
		sep[i] = "---"
		if i > 0 {
			sep[i] = "---:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

// WriteMarkdown renders the report as Markdown: the machine, then one table
// per part.
func (r *Report) WriteMarkdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Measured %s on %d cores (%s), Linux %s, %s; native %s; Node.js %s with Pyodide %s; guest %s.\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), m.CPUs, m.CPU, m.Kernel, m.Go, m.Python, orDash(m.Node), orDash(m.Pyodide), m.Guest)
	fmt.Fprintf(w, "Load average at start %s, at end %s. %s\n\n", m.LoadAvg, m.LoadEnd, r.Noise)

	fmt.Fprintf(w, "### Cold start to first output (median of %d; ratio to native python3)\n\n", r.Config.ColdReps)
	t := table{head: []string{"what", "ms", "ratio"}}
	for _, c := range r.Cold {
		t.add(c.Name+note(c.Note), num(c.Median), ratio(c.Ratio))
	}
	t.write(w)

	fmt.Fprintf(w, "### Warm, inside one process (median of %d)\n\n", r.Config.WarmReps)
	t = table{head: []string{"what", "value", "unit", "ratio"}}
	for _, c := range r.Warm {
		unit := c.Unit
		if unit == "" {
			unit = "ms"
		}
		t.add(c.Name+note(c.Note), num(c.Median), unit, ratio(c.Ratio))
	}
	t.write(w)

	fmt.Fprintf(w, "### CPU (median of %d; time inside the interpreter, start-up excluded)\n\n", r.Config.CPUReps)
	t = table{head: []string{"program", "native ms", "fumehood ms", "Pyodide ms", "fumehood / native", "fumehood / Pyodide", "Pyodide / native"}}
	var vn, vp, pn []float64
	for _, c := range r.CPU {
		t.add(c.Program+": "+c.What, num(c.Native), num(c.Fumehood), num(c.Pyodide), ratio(c.VsNative), ratio(c.VsPyodide), ratio(c.PyoNative))
		vn, vp, pn = append(vn, c.VsNative), append(vp, c.VsPyodide), append(pn, c.PyoNative)
	}
	if len(r.CPU) > 0 {
		t.add("**geometric mean**", "", "", "", ratio(geomean(vn)), ratio(geomean(vp)), ratio(geomean(pn)))
	}
	t.write(w)

	fmt.Fprintf(w, "### Memory: resident memory growth of one process holding N idle sandboxes\n\n")
	t = table{head: []string{"what", "N", "RSS growth MB", "per sandbox MB"}}
	for _, c := range r.Memory {
		t.add(c.Kind, fmt.Sprint(c.N), num(c.TotalMB), num(c.PerMB))
	}
	t.write(w)

	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
	}
}

func note(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// Markers delimit the generated part of bench/README.md.
const (
	beginMarker = "<!-- make bench: begin -->"
	endMarker   = "<!-- make bench: end -->"
)

// splice replaces the text between the markers in doc with body, or appends
// a marked section when doc has none.
func splice(doc, body string) string {
	i := strings.Index(doc, beginMarker)
	j := strings.Index(doc, endMarker)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + beginMarker + "\n" + body + endMarker + "\n"
	}
	return doc[:i+len(beginMarker)] + "\n" + body + doc[j:]
}
