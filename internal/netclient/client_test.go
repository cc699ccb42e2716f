package netclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/netclient"
	"github.com/fumehood/fumehood/netpolicy"
)

// server answers /redirect/N with a redirect to /redirect/N-1, /big with
// 100 bytes, and anything else with the request's method and body.
func server(t *testing.T) (*httptest.Server, int) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		_, scanErr := fmt.Sscanf(r.URL.Path, "/redirect/%d", &n)
		switch {
		case r.URL.Path == "/big":
			fmt.Fprint(w, strings.Repeat("x", 100))
		case scanErr == nil && n > 0:
			http.Redirect(w, r, fmt.Sprintf("/redirect/%d", n-1), http.StatusFound)
		default:
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s", r.Method, b)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, int(netip.MustParseAddrPort(srv.Listener.Addr().String()).Port())
}

func newClient(t *testing.T, p *netpolicy.Policy) *netclient.Client {
	tr, err := netpolicy.NewTransport(p)
	require.NoError(t, err)
	t.Cleanup(tr.CloseIdleConnections)
	return netclient.New(tr)
}

// TestClientCountsAndBounds: a client counts its run's requests (redirect
// hops included) against MaxRequests, and refuses a body, a response or a
// chain of redirects past the policy's bounds, naming the rule.
func TestClientCountsAndBounds(t *testing.T) {
	srv, port := server(t)
	ctx := context.Background()
	p := &netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "127.0.0.1", Port: port}}, AllowPrivate: true,
		MaxRequests: 4, MaxRequestBytes: 3, MaxResponseBytes: 50, MaxRedirects: 1}
	c := newClient(t, p)
	resp, err := c.Do(ctx, &netclient.Request{Method: "post", URL: srv.URL + "/echo", Body: []byte("abc")})
	require.NoError(t, err)
	assert.Equal(t, "POST abc", string(resp.Body))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = c.Do(ctx, &netclient.Request{URL: srv.URL + "/redirect/1"})
	require.NoError(t, err)
	assert.Equal(t, srv.URL+"/redirect/0", resp.URL)
	assert.Equal(t, 3, c.Requests(), "a redirect hop counts")

	rule := func(err error) string {
		var de *netpolicy.DeniedError
		if !assert.ErrorAs(t, err, &de) {
			return ""
		}
		assert.ErrorIs(t, err, netpolicy.ErrDenied)
		return de.Rule
	}
	_, err = c.Do(ctx, &netclient.Request{Method: "POST", URL: srv.URL, Body: []byte("four")})
	assert.Equal(t, "MaxRequestBytes", rule(err))
	_, err = c.Do(ctx, &netclient.Request{URL: srv.URL + "/big"})
	assert.Equal(t, "MaxResponseBytes", rule(err))
	_, err = c.Do(ctx, &netclient.Request{URL: srv.URL + "/redirect/3"})
	assert.Equal(t, "MaxRequests", rule(err), "the fourth request was the big one's")
	assert.Equal(t, 4, c.Requests())

	c = newClient(t, p)
	_, err = c.Do(ctx, &netclient.Request{URL: srv.URL + "/redirect/2"})
	assert.Equal(t, "MaxRedirects", rule(err))
	_, err = c.Do(ctx, &netclient.Request{URL: "http://elsewhere.test/"})
	assert.Equal(t, "allow-list", rule(err))
}

// TestClientNamesARequestRefusedAtDialing: a name that resolves to a
// private address is refused at dialing, and the refusal names the
// request (without its query), which is not counted.
func TestClientNamesARequestRefusedAtDialing(t *testing.T) {
	c := newClient(t, &netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "svc.test"}},
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}})
	_, err := c.Do(context.Background(), &netclient.Request{URL: "http://svc.test/p?token=secret"})
	var de *netpolicy.DeniedError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "AllowPrivate", de.Rule)
	assert.Equal(t, "GET", de.Method)
	assert.Equal(t, "http://svc.test/p", de.URL)
	assert.Equal(t, 0, c.Requests())
}
