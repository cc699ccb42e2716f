package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fumehood/fumehood/mcpserver"
	"github.com/fumehood/fumehood/sandbox"
)

// metrics are what `fumehood mcp --http` serves at /metrics, in
// Prometheus's format: each run (counted by what stopped it, with its wall
// time and fuel, from sandbox.Options.OnRun), what the server holds
// (mcpserver.Server.Stats, read at each scrape), and the process's own
// (resident memory, the Go runtime's heap and goroutines).
type metrics struct {
	reg      *prometheus.Registry
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	fuel     *prometheus.CounterVec
	peak     *prometheus.HistogramVec
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	kind := []string{"kind"}
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fumehood_runs_total",
		Help: "Runs that ended, by kind (oneshot or session) and by what stopped them (exit, fuel, deadline, canceled, memory, output, stack, trap, error)."},
		[]string{"kind", "stop"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fumehood_run_duration_seconds",
		Help: "Wall time of a run.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, kind)
	m.fuel = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fumehood_fuel_used_total",
		Help: "Fuel (WebAssembly instructions) the runs used."}, kind)
	m.peak = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fumehood_run_peak_memory_bytes",
		Help: "The largest size of a run's linear memory.", Buckets: prometheus.ExponentialBuckets(1<<20, 4, 8)}, kind)
	m.reg.MustRegister(m.runs, m.duration, m.fuel, m.peak,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records a run: sandbox.Options.OnRun.
func (m *metrics) observe(e sandbox.RunEvent) {
	if e.Result == nil {
		return
	}
	kind := "oneshot"
	if e.Session {
		kind = "session"
	}
	m.runs.WithLabelValues(kind, e.Result.Stop.String()).Inc()
	m.duration.WithLabelValues(kind).Observe(e.Result.Duration.Seconds())
	m.fuel.WithLabelValues(kind).Add(float64(e.Result.FuelUsed))
	m.peak.WithLabelValues(kind).Observe(float64(e.Result.PeakMemory))
}

// watch adds the gauges of what srv holds, read at each scrape.
func (m *metrics) watch(srv *mcpserver.Server) {
	gauge := func(name, help string, v func(mcpserver.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(srv.Stats()) })
	}
	m.reg.MustRegister(
		gauge("fumehood_sessions", "Sessions open, of all clients.", func(s mcpserver.Stats) float64 { return float64(s.Sessions) }),
		gauge("fumehood_sessions_hibernated", "Open sessions between calls (holding only their changed pages).",
			func(s mcpserver.Stats) float64 { return float64(s.Hibernated) }),
		gauge("fumehood_runs_in_progress", "Runs executing.", func(s mcpserver.Stats) float64 { return float64(s.Runs) }),
		gauge("fumehood_clients", "MCP sessions (clients) held over HTTP.", func(s mcpserver.Stats) float64 { return float64(s.Clients) }),
		gauge("fumehood_memory_held_bytes", "Host memory the open sessions and runs hold of the budget.",
			func(s mcpserver.Stats) float64 { return float64(s.MemoryHeld) }),
		gauge("fumehood_memory_budget_bytes", "The server's host memory budget for guests.",
			func(s mcpserver.Stats) float64 { return float64(s.MemoryBudget) }),
	)
}

// handler serves the metrics.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
