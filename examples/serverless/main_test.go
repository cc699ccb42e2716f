package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerless(t *testing.T) {
	sandboxtest.Built(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	assert.Equal(t, `print(sum(range(10)))
  -> exit 0, stdout "45\n", limit ""
print(open('/work/name.txt').read().upper())
  -> exit 0, stdout "ADA\n", limit ""
while True: pass
  -> exit -1, stdout "", limit "fuel"
`, out.String())
}

// TestConcurrentRequests fires requests at once, some of which hit a
// limit, and checks that each gets its own answer.
func TestConcurrentRequests(t *testing.T) {
	sandboxtest.Built(t)
	ctx := context.Background()
	srv := httptest.NewServer(newMux(sandboxtest.Python(t), defaultLimits, nil))
	defer srv.Close()

	cases := []struct {
		name   string
		req    runRequest
		stdout string // a prefix of the output
		stderr string // in the error output
		exit   int
		limit  string
	}{
		{name: "sum", req: runRequest{Code: "print(sum(range(10)))"}, stdout: "45\n"},
		{name: "file", req: runRequest{Code: "print(open('/work/a').read() * 2)", Files: map[string]string{"/work/a": "ab"}}, stdout: "abab\n"},
		// Each request has its own filesystem: the file above is not here.
		{name: "isolated", req: runRequest{Code: "import os; print(os.path.exists('/work/a'))"}, stdout: "False\n"},
		{name: "exception", req: runRequest{Code: "print('before'); 1 / 0"}, stdout: "before\n", stderr: "ZeroDivisionError", exit: 1},
		{name: "fuel", req: runRequest{Code: "while True: pass"}, exit: -1, limit: "fuel"},
		{name: "memory", req: runRequest{Code: "x = bytearray(512 << 20)"}, stderr: "MemoryError", exit: 1, limit: "memory"},
		{name: "output", req: runRequest{Code: "while True: print('x' * 1000)"}, stdout: "xxxx", exit: -1, limit: "output"},
		{name: "timeout", req: runRequest{Code: "import time; time.sleep(60)", TimeoutMS: 200}, exit: -1, limit: "timeout"},
	}
	answers := make([]*runResponse, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { answers[i], errs[i] = post(ctx, srv.URL+"/run", c.req) })
	}
	wg.Wait()

	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, errs[i])
			got := answers[i]
			assert.True(t, strings.HasPrefix(got.Stdout, c.stdout), "stdout %q", got.Stdout)
			assert.Contains(t, got.Stderr, c.stderr)
			assert.Equal(t, c.exit, got.ExitCode)
			assert.Equal(t, c.limit, got.Limit, got.Error)
			assert.Equal(t, c.exit != 0, got.Error != "", got.Error)
			assert.Positive(t, got.FuelUsed)
		})
	}
	assert.LessOrEqual(t, len(answers[6].Stdout), defaultLimits.MaxOutput, "output is bounded")
}

func TestBadRequests(t *testing.T) {
	sandboxtest.Built(t)
	srv := httptest.NewServer(newMux(sandboxtest.Python(t), defaultLimits, nil))
	defer srv.Close()

	for name, body := range map[string]string{
		"not JSON":      `print(1)`,
		"unknown field": `{"code": "print(1)", "fuel": 1e12}`,
		"relative path": `{"code": "", "files": {"a.txt": "x"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/run", "application/json", strings.NewReader(body))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		})
	}
	resp, err := http.Get(srv.URL + "/run")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// TestStatefulTwoInstances: two instances of the function, sharing a
// store, take turns on one conversation: each continues the other's state.
func TestStatefulTwoInstances(t *testing.T) {
	sandboxtest.Built(t)
	ctx := context.Background()
	st, err := sessionstore.Open(ctx, t.TempDir(), nil)
	require.NoError(t, err)
	defer st.Close()
	var instances []*httptest.Server
	for range 2 {
		srv := httptest.NewServer(newMux(sandboxtest.Python(t), defaultLimits, st))
		defer srv.Close()
		instances = append(instances, srv)
	}
	url := func(i int, name string) string { return instances[i%2].URL + "/conversations/" + name + "/run" }
	resp, err := post(ctx, url(0, "demo"), runRequest{Code: "x = 41", Files: map[string]string{"/work/note": "kept"}})
	require.NoError(t, err)
	require.Equal(t, 0, resp.ExitCode, resp.Stderr)
	for i := 1; i <= 4; i++ {
		resp, err = post(ctx, url(i, "demo"), runRequest{Code: "x += 1; x"})
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(41+i), resp.Value, "instance %d", i%2)
	}
	resp, err = post(ctx, url(1, "demo"), runRequest{Code: "print(open('/work/note').read())"})
	require.NoError(t, err)
	assert.Equal(t, "kept\n", resp.Stdout)
	resp, err = post(ctx, url(0, "other"), runRequest{Code: "'x' in globals()"})
	require.NoError(t, err)
	assert.Equal(t, "False", resp.Value, "conversations are apart")

	_, err = post(ctx, url(0, "a..b"), runRequest{Code: "1"})
	assert.ErrorContains(t, err, "400")
	_, err = post(ctx, url(0, "demo"), runRequest{Code: "x = 0", Files: map[string]string{"relative": "x"}})
	assert.ErrorContains(t, err, "400")
	resp, err = post(ctx, url(1, "demo"), runRequest{Code: "x"})
	require.NoError(t, err)
	assert.Equal(t, "45", resp.Value, "a bad request commits nothing")
	// Without a store the route is not there.
	plain := httptest.NewServer(newMux(sandboxtest.Python(t), defaultLimits, nil))
	defer plain.Close()
	_, err = post(ctx, plain.URL+"/conversations/demo/run", runRequest{Code: "1"})
	assert.ErrorContains(t, err, "404")
}
