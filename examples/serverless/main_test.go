package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerless(t *testing.T) {
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
	ctx := context.Background()
	srv := httptest.NewServer(newMux(sandboxtest.Python(t), defaultLimits))
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
	srv := httptest.NewServer(newMux(sandboxtest.Python(t), defaultLimits))
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
