// Command serverless is an HTTP function that runs the Python code it is
// sent: one compiled guest for the whole process, a fresh sandbox for each
// request, and limits on every run. Requests and responses are JSON.
//
//	go run ./examples/serverless               # a demo: serve, send three requests, stop
//	go run ./examples/serverless -listen :8080 # serve until interrupted
//	curl -d '{"code": "print(6 * 7)"}' localhost:8080/run
//
// With -store, it is also stateful: POST /conversations/NAME/run resumes
// the conversation NAME from the store (a directory or nats://), runs,
// and commits it, so that any instance of the function, in any process,
// continues it.
//
//	go run ./examples/serverless -listen :8080 -store /tmp/fumehood-sessions
//	curl -d '{"code": "x = 41"}' localhost:8080/conversations/demo/run
//	curl -d '{"code": "print(x + 1)"}' localhost:8080/conversations/demo/run
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sessionstore"
	_ "github.com/fumehood/fumehood/sessionstore/natsstore" // -store nats://
)

// runRequest is what a client sends.
type runRequest struct {
	Code string `json:"code"`
	// Files are written into the sandbox before the run: guest path to
	// content, such as {"/work/input.txt": "..."}.
	Files map[string]string `json:"files,omitempty"`
	// TimeoutMS lowers the run's deadline; it cannot raise it.
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// runResponse is what the function answers when the code ran.
type runResponse struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"` // 1 for an uncaught exception, -1 when a limit stopped the run
	Error    string `json:"error,omitempty"`
	// Limit names the limit that stopped the run: "timeout", "fuel",
	// "memory" or "output".
	Limit    string `json:"limit,omitempty"`
	FuelUsed int64  `json:"fuel_used"`
	Millis   int64  `json:"ms"`
	// Value is the repr of a conversation's code's last expression.
	Value string `json:"value,omitempty"`
}

// handler serves POST /run. It is safe for concurrent use: the guest is
// shared, and each request gets its own sandbox.
type handler struct {
	py     *sandbox.Guest
	limits sandbox.Limits // the most any request gets
}

// defaultLimits bound every request: well under the library's defaults, as
// suits a public endpoint.
var defaultLimits = sandbox.Limits{
	Timeout:   10 * time.Second,
	Fuel:      2_000_000_000, // about 0.2-0.4 s of CPU; starting Python takes a quarter of it
	Memory:    64 << 20,
	MaxOutput: 64 << 10,
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, ok := decode(w, r)
	if !ok {
		return
	}

	// A fresh sandbox: an empty in-memory filesystem that nothing else sees,
	// discarded when the request ends.
	sb, err := h.py.NewSandbox(&sandbox.Config{Limits: h.limits})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer sb.Close()
	for name, content := range req.Files {
		if err := sb.Files().WriteFile(name, []byte(content)); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
	}

	opts := runOptions(req)
	// The request's context: a client that hangs up stops the run.
	res, err := sb.Run(r.Context(), req.Code, opts)
	respond(w, res, err)
}

// decode reads a request, answering 400 to a bad one.
func decode(w http.ResponseWriter, r *http.Request) (runRequest, bool) {
	var req runRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return req, false
	}
	return req, true
}

// runOptions are a request's run options: a flood of output ends the run
// instead of being dropped, and the request's timeout can only lower the
// sandbox's.
func runOptions(req runRequest) *sandbox.RunOptions {
	opts := &sandbox.RunOptions{StopAtOutputLimit: true}
	if t := time.Duration(req.TimeoutMS) * time.Millisecond; t > 0 {
		opts.Limits.Timeout = t
	}
	return opts
}

// respond writes a run's outcome.
func respond(w http.ResponseWriter, res *sandbox.Result, err error) {
	if res == nil {
		// The run never started: a fault of the host, not of the code.
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp := runResponse{
		Stdout: string(res.Stdout), Stderr: string(res.Stderr), ExitCode: res.ExitCode,
		Limit: limitName(err), FuelUsed: res.FuelUsed, Millis: res.Duration.Milliseconds(), Value: res.Value,
	}
	if err != nil {
		resp.Error = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(&resp)
}

// conversations serves POST /conversations/{name}/run: the conversation's
// session resumed from the store (or a new one), the run, the commit. It
// keeps no session between requests, as a function instance may not live
// to see the next one.
type conversations struct {
	runs *sessionstore.Sessions
}

func (c *conversations) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := sessionstore.CheckName(name); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, ok := decode(w, r)
	if !ok {
		return
	}
	var res *sandbox.Result
	var runErr, badFile error
	err := c.runs.Do(r.Context(), name, func(ctx context.Context, s *sandbox.Session, fresh bool) error {
		for path, content := range req.Files {
			if badFile = s.Files().WriteFile(path, []byte(content)); badFile != nil {
				return badFile
			}
		}
		res, runErr = s.Run(ctx, req.Code, runOptions(req))
		if errors.Is(runErr, sandbox.ErrClosed) {
			return runErr // nothing to commit
		}
		return nil // the state after an exception or a limit is kept too
	})
	switch {
	case errors.Is(err, sessionstore.ErrBusy), errors.Is(err, sessionstore.ErrConflict), errors.Is(err, sessionstore.ErrLeaseLost):
		// Another request of the conversation ran; this one's effects
		// are discarded: the client may send it again.
		http.Error(w, err.Error(), http.StatusConflict)
	case badFile != nil:
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		respond(w, res, runErr)
	}
}

// limitName names the limit that stopped a run, if one did.
func limitName(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, sandbox.ErrFuelExhausted):
		return "fuel"
	case errors.Is(err, sandbox.ErrMemoryLimit):
		return "memory"
	case errors.Is(err, sandbox.ErrOutputLimit):
		return "output"
	}
	return ""
}

// newMux routes POST /run to a handler running code with py and, with a
// store, POST /conversations/{name}/run to the conversations in it.
func newMux(py *sandbox.Guest, limits sandbox.Limits, st sessionstore.Store) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("POST /run", &handler{py: py, limits: limits})
	if st != nil {
		mux.Handle("POST /conversations/{name}/run", &conversations{runs: sessionstore.NewSessions(st, py,
			&sessionstore.SessionsOptions{Config: &sandbox.Config{Limits: limits}, MaxLive: -1})})
	}
	return mux
}

func main() {
	listen := flag.String("listen", "", "serve on this address until interrupted, instead of the demo")
	store := flag.String("store", "", "serve conversations kept in this store: a directory or nats://host:port")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *listen != "" {
		err = serve(ctx, *listen, *store)
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// serve serves on addr until ctx is done, with the conversations of the
// store at storeURL if it is not empty.
func serve(ctx context.Context, addr, storeURL string) error {
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer py.Close()
	var st sessionstore.Store
	if storeURL != "" {
		if st, err = sessionstore.Open(ctx, storeURL, nil); err != nil {
			return err
		}
		defer st.Close()
	}
	srv := &http.Server{Addr: addr, Handler: newMux(py, defaultLimits, st), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Printf("serving POST http://%s/run", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// run starts the function on a local port, sends it a few requests and
// prints the answers.
func run(ctx context.Context, w io.Writer) error {
	// Compile once, when the process starts: about half a second. Each
	// request then costs only the run.
	py, err := sandbox.CompilePython(ctx, nil)
	if err != nil {
		return err
	}
	defer py.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newMux(py, defaultLimits, nil)}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	url := "http://" + ln.Addr().String() + "/run"

	for _, req := range []runRequest{
		{Code: "print(sum(range(10)))"},
		{Code: "print(open('/work/name.txt').read().upper())", Files: map[string]string{"/work/name.txt": "ada"}},
		{Code: "while True: pass"},
	} {
		resp, err := post(ctx, url, req)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n  -> exit %d, stdout %q, limit %q\n", req.Code, resp.ExitCode, resp.Stdout, resp.Limit)
	}
	return nil
}

// post sends req to the function at url and decodes its answer.
func post(ctx context.Context, url string, req runRequest) (*runResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(hresp.Body, 1<<10))
		return nil, fmt.Errorf("%s: %s", hresp.Status, bytes.TrimSpace(msg))
	}
	var resp runResponse
	if err := json.NewDecoder(hresp.Body).Decode(&resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
