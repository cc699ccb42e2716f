package hostchan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/internal/netclient"
	"github.com/fumehood/fumehood/internal/textcut"
	"github.com/fumehood/fumehood/netpolicy"
)

// httpHeaderRoom is what an HTTP request frame may hold beyond the
// policy's body limit: the method, URL and headers.
const httpHeaderRoom = 64 << 10

// responseRoom is what a response frame may hold beyond the larger of
// MaxResponseBytes and the policy's response body limit: its JSON header
// (an HTTP response's status, URL and headers, which netpolicy bounds at
// netpolicy.MaxResponseHeaderBytes before encoding). A response that does
// not fit is replaced by an error (kind "limit").
const responseRoom = 256 << 10

// Bounds on the texts an error response echoes: a name the guest sent (a
// function's) is cut at maxEchoBytes, a whole message at maxMessageBytes.
const (
	maxEchoBytes    = 256
	maxMessageBytes = 2048
)

// Server answers the requests a guest writes to the channel file: calls to
// host functions and, with a network policy, HTTP requests. Mount FS in
// the guest's filesystem and bind each run with Begin. A Server serves
// one run at a time.
type Server struct {
	funcs                    map[string]hostcall.Handler
	maxCalls, maxReq, maxRes int
	transport                *netpolicy.Transport // nil: no network
	log                      *slog.Logger

	mu  sync.Mutex
	run *run

	// The channels' share of host memory (device.go).
	cmu     sync.Mutex
	handles int      // open handles of FS, counted against MaxOpen
	owner   *channel // the channel holding a request or response, or nil
	report  func(errno uint16)
	held    atomic.Int64 // bytes of frames and responses held
	peak    atomic.Int64 // the most held has been
}

// Usage is what a server holds for its guest now, and the bound it never
// exceeds (see docs/SECURITY.md, "Host memory per sandbox").
type Usage struct {
	// Held counts the bytes of request frames and responses the server
	// holds for its guest's channels.
	Held int64
	// Peak is the most Held has been since the server was made.
	Peak int64
	// Bound is the most Held can be: one request frame of the largest
	// size the server reads and one response of the largest size it
	// sends (MaxFrameBytes + MaxResponseFrameBytes).
	Bound int64
	// Open counts the handles open in FS (at most MaxOpen).
	Open int
}

// Usage reports what the server holds for its guest.
func (s *Server) Usage() Usage {
	s.cmu.Lock()
	open := s.handles
	s.cmu.Unlock()
	return Usage{Held: s.held.Load(), Peak: s.peak.Load(),
		Bound: int64(s.MaxFrameBytes() + s.MaxResponseFrameBytes()), Open: open}
}

// charge adds n (negative: releases) to the bytes held.
func (s *Server) charge(n int64) {
	h := s.held.Add(n)
	for {
		p := s.peak.Load()
		if h <= p || s.peak.CompareAndSwap(p, h) {
			return
		}
	}
}

// acquire gives c the server's slot for one request and its response,
// unless another channel holds it.
func (s *Server) acquire(c *channel) bool {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.owner != nil && s.owner != c {
		return false
	}
	s.owner = c
	return true
}

func (s *Server) release(c *channel) {
	s.cmu.Lock()
	if s.owner == c {
		s.owner = nil
	}
	s.cmu.Unlock()
}

type run struct {
	ctx    context.Context
	calls  int
	client *netclient.Client
}

// Stats counts what one run asked of the server.
type Stats struct {
	// Calls counts host-function calls, refused ones included (a request
	// too large to read is not counted: it is refused unread).
	Calls int
	// HTTPRequests counts HTTP requests sent, each redirect hop included.
	HTTPRequests int
}

// NewServer makes a server for the functions of cfg (nil: none) and the
// network policy (nil: no network). Every call and request is logged to
// logger (nil: records are dropped).
func NewServer(cfg *hostcall.Config, network *netpolicy.Policy, logger *slog.Logger) (*Server, error) {
	var c hostcall.Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxCalls < 0 || c.MaxRequestBytes < 0 || c.MaxResponseBytes < 0 {
		return nil, errors.New("hostcall: negative limit")
	}
	s := &Server{
		funcs:    make(map[string]hostcall.Handler, len(c.Funcs)),
		maxCalls: orDefault(c.MaxCalls, hostcall.DefaultMaxCalls),
		maxReq:   orDefault(c.MaxRequestBytes, hostcall.DefaultMaxRequestBytes),
		maxRes:   orDefault(c.MaxResponseBytes, hostcall.DefaultMaxResponseBytes),
		log:      logger,
	}
	for name, h := range c.Funcs {
		if name == "" || h == nil {
			return nil, fmt.Errorf("hostcall: function %q has no name or no handler", name)
		}
		s.funcs[name] = h
	}
	if network != nil {
		t, err := netpolicy.NewTransport(network)
		if err != nil {
			return nil, err
		}
		s.transport = t
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// maxFrame is the largest request frame the server reads.
func (s *Server) maxFrame() int { return s.MaxFrameBytes() }

// MaxFrameBytes is the largest request frame the server reads: the larger
// of MaxRequestBytes and, with a network policy, its MaxRequestBytes plus
// 64 KiB for the method, URL and headers.
func (s *Server) MaxFrameBytes() int {
	m := s.maxReq
	if s.transport != nil {
		body := s.transport.Policy().MaxRequestBytes
		if body == 0 {
			body = netpolicy.DefaultMaxRequestBytes
		}
		m = max(m, int(min(body, 1<<30))+httpHeaderRoom)
	}
	return m
}

// MaxResponseFrameBytes is the largest response frame the server sends:
// the larger of MaxResponseBytes and, with a network policy, its
// MaxResponseBytes, plus 256 KiB for the response's JSON header.
func (s *Server) MaxResponseFrameBytes() int {
	m := s.maxRes
	if s.transport != nil {
		body := s.transport.Policy().MaxResponseBytes
		if body == 0 {
			body = netpolicy.DefaultMaxResponseBytes
		}
		m = max(m, int(min(body, 1<<30)))
	}
	return m + responseRoom
}

// Begin binds a run to the server: requests are served with ctx (the run's
// context, carrying its deadline) until end is called, which returns what
// the run asked for. Begin fails if another run is bound.
func (s *Server) Begin(ctx context.Context) (end func() Stats, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		return nil, errors.New("hostcall: the server is serving another run")
	}
	r := &run{ctx: ctx}
	if s.transport != nil {
		r.client = netclient.New(s.transport)
	}
	s.run = r
	return func() Stats {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.run == r {
			s.run = nil
		}
		st := Stats{Calls: r.calls}
		if r.client != nil {
			st.HTTPRequests = r.client.Requests()
		}
		return st
	}, nil
}

// Close closes the network connections kept alive.
func (s *Server) Close() {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
}

// request is a request frame's header.
type request struct {
	Op string `json:"op"` // "call" or "http"
	// A call.
	Name string          `json:"name,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
	// An HTTP request; the body is the frame's body.
	Method  string      `json:"method,omitempty"`
	URL     string      `json:"url,omitempty"`
	Headers [][2]string `json:"headers,omitempty"`
}

// response is a response frame's header.
type response struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
	// An HTTP response; the body is the frame's body.
	Status  int         `json:"status,omitempty"`
	Reason  string      `json:"reason,omitempty"`
	Headers [][2]string `json:"headers,omitempty"`
	URL     string      `json:"url,omitempty"`
}

type wireError struct {
	// Kind is "error", "unknown", "arguments", "panic", "limit",
	// "canceled", "denied", "network" or "protocol".
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Rule    string `json:"rule,omitempty"`
}

// serve answers one request frame with one response frame.
func (s *Server) serve(header, body []byte) []byte {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	var req request
	if err := json.Unmarshal(header, &req); err != nil {
		return errorFrame("protocol", fmt.Errorf("%w: %v", ErrFrame, err))
	}
	if r == nil {
		return errorFrame("protocol", ErrNoRun)
	}
	var out []byte
	switch req.Op {
	case "call":
		out = s.call(r, &req, len(header)+len(body))
	case "http":
		out = s.http(r, &req, body)
	default:
		return errorFrame("protocol", fmt.Errorf("%w: unknown op %q", ErrFrame, clip(req.Op, maxEchoBytes)))
	}
	if len(out) > s.MaxResponseFrameBytes() {
		return errorFrame("limit", fmt.Errorf("%w: a response of %d bytes, the limit is %d",
			hostcall.ErrTooLarge, len(out), s.MaxResponseFrameBytes()))
	}
	return out
}

// clip cuts s to at most n bytes, at a character boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut, _ := textcut.Cut(s, n-len(mark))
	return cut + mark
}

func (s *Server) call(r *run, req *request, size int) []byte {
	start := time.Now()
	r.calls++
	result, err := s.invoke(r, req, size)
	level, attrs := slog.LevelInfo, []slog.Attr{
		slog.String("function", clip(req.Name, maxEchoBytes)), slog.Int("request_bytes", size),
		slog.Int("response_bytes", len(result)), slog.Duration("duration", time.Since(start)),
	}
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
		var p *hostcall.PanicError
		if errors.As(err, &p) {
			level = slog.LevelError
			attrs = append(attrs, slog.String("panic", fmt.Sprint(p.Value)), slog.String("stack", string(p.Stack)))
		}
	}
	s.log.LogAttrs(r.ctx, level, "fumehood host call", attrs...)
	if err != nil {
		return errorFrame(kindOf(err), err)
	}
	return frame(&response{OK: true, Result: result}, nil)
}

func (s *Server) invoke(r *run, req *request, size int) (json.RawMessage, error) {
	if r.calls > s.maxCalls {
		return nil, fmt.Errorf("%w: the limit is %d per run", hostcall.ErrTooManyCalls, s.maxCalls)
	}
	if size > s.maxReq {
		return nil, fmt.Errorf("%w: a request of %d bytes, the limit is %d", hostcall.ErrTooLarge, size, s.maxReq)
	}
	h, ok := s.funcs[req.Name]
	if !ok {
		return nil, fmt.Errorf("%w %q", hostcall.ErrUnknownFunction, clip(req.Name, maxEchoBytes))
	}
	args := req.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	type outcome struct {
		result any
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- outcome{err: &hostcall.PanicError{Function: req.Name, Value: v, Stack: debug.Stack()}}
			}
		}()
		res, err := h(r.ctx, args)
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-r.ctx.Done():
		// The handler ignores its context; the run ends without it.
		return nil, r.ctx.Err()
	}
	if o.err != nil {
		return nil, o.err
	}
	b, err := json.Marshal(o.result)
	if err != nil {
		return nil, fmt.Errorf("hostcall: function %q returned a result JSON cannot encode: %w", req.Name, err)
	}
	if len(b) > s.maxRes {
		return nil, fmt.Errorf("%w: a result of %d bytes, the limit is %d", hostcall.ErrTooLarge, len(b), s.maxRes)
	}
	return b, nil
}

func kindOf(err error) string {
	var p *hostcall.PanicError
	var a *hostcall.ArgumentError
	switch {
	case errors.As(err, &p):
		return "panic"
	case errors.As(err, &a):
		return "arguments"
	case errors.Is(err, hostcall.ErrUnknownFunction):
		return "unknown"
	case errors.Is(err, hostcall.ErrTooManyCalls), errors.Is(err, hostcall.ErrTooLarge):
		return "limit"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}

func (s *Server) http(r *run, req *request, body []byte) []byte {
	if r.client == nil {
		err := &netpolicy.DeniedError{Method: clip(req.Method, maxEchoBytes), URL: clip(req.URL, maxMessageBytes),
			Rule: "no network policy", Reason: "the sandbox has no network access"}
		return deniedFrame(err)
	}
	start := time.Now()
	h := make(http.Header, len(req.Headers))
	for _, kv := range req.Headers {
		h.Add(kv[0], kv[1])
	}
	resp, err := r.client.Do(r.ctx, &netclient.Request{Method: req.Method, URL: req.URL, Header: h, Body: body})
	attrs := []slog.Attr{slog.String("method", clip(req.Method, maxEchoBytes)), slog.String("url", clip(req.URL, maxMessageBytes)),
		slog.Int("request_bytes", len(body)), slog.Duration("duration", time.Since(start))}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		s.log.LogAttrs(r.ctx, slog.LevelWarn, "fumehood http request", attrs...)
		var de *netpolicy.DeniedError
		if errors.As(err, &de) {
			return deniedFrame(de)
		}
		if r.ctx.Err() != nil {
			return errorFrame("canceled", r.ctx.Err())
		}
		return errorFrame("network", err)
	}
	attrs = append(attrs, slog.Int("status", resp.StatusCode), slog.Int("response_bytes", len(resp.Body)))
	s.log.LogAttrs(r.ctx, slog.LevelInfo, "fumehood http request", attrs...)
	out := &response{OK: true, Status: resp.StatusCode, Reason: http.StatusText(resp.StatusCode), URL: resp.URL}
	for k, vs := range resp.Header {
		for _, v := range vs {
			out.Headers = append(out.Headers, [2]string{k, v})
		}
	}
	return frame(out, resp.Body)
}

// errorFrame is the response reporting err, its message cut at
// maxMessageBytes.
func errorFrame(kind string, err error) []byte {
	return frame(&response{Error: &wireError{Kind: kind, Message: clip(err.Error(), maxMessageBytes)}}, nil)
}

func deniedFrame(de *netpolicy.DeniedError) []byte {
	return frame(&response{Error: &wireError{Kind: "denied", Message: clip(de.Error(), maxMessageBytes),
		Rule: clip(de.Rule, maxEchoBytes)}}, nil)
}

// frame encodes a response frame, in a buffer of its exact size (the
// server charges its capacity).
func frame(r *response, body []byte) []byte {
	h, err := json.Marshal(r)
	if err != nil { // cannot happen: every field encodes
		h = []byte(`{"ok":false,"error":{"kind":"protocol","message":"unencodable response"}}`)
	}
	return AppendFrame(make([]byte, 0, frameHead+len(h)+len(body)), h, body)
}
