package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRunAllowHost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "pong") }))
	defer srv.Close()
	hostport := strings.TrimPrefix(srv.URL, "http://")
	code := fmt.Sprintf("import urllib.request\nprint(urllib.request.urlopen(%q).read().decode())", srv.URL+"/ping")

	status, out, errs := fumehood(t, "", "run", "--allow-host", hostport, "--allow-private", "-c", code)
	assert.Equal(t, 0, status, errs)
	assert.Equal(t, "pong\n", out)

	status, _, errs = fumehood(t, "", "run", "--allow-host", hostport, "-c", code)
	assert.Equal(t, 1, status, "loopback needs --allow-private")
	assert.Contains(t, errs, "PolicyError")
	assert.Contains(t, errs, "refused by AllowPrivate")

	status, _, errs = fumehood(t, "", "run", "--allow-host", "example.com", "--allow-private", "-c", code)
	assert.Equal(t, 1, status)
	assert.Contains(t, errs, "refused by allow-list")

	// A refused request the code catches leaves nothing on stderr: no
	// "Exception ignored" from a half-made response at exit.
	for _, scheme := range []string{"http", "https"} {
		caught := fmt.Sprintf("import urllib.request\ntry:\n    urllib.request.urlopen(%q)\nexcept Exception as e:\n    print(type(e).__name__)",
			scheme+"://example.com/")
		status, out, errs = fumehood(t, "", "run", "--allow-host", "example.org", "-c", caught)
		assert.Equal(t, 0, status, errs)
		assert.Equal(t, "PolicyError\n", out)
		assert.Empty(t, errs, scheme)
	}

	status, _, errs = fumehood(t, "", "run", "--allow-host", "http://x", "-c", "pass")
	assert.Equal(t, 2, status, errs)
}
