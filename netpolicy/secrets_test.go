package netpolicy

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testSecret = "sk-live-0123456789"

// secretServers are loopback servers that answer with the X-Key header they
// got: two over https on different ports, one over plain http.
type secretServers struct {
	tlsA, tlsC, plainB *httptest.Server
}

func newSecretServers(t *testing.T) *secretServers {
	echo := func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Header.Get("X-Key")) }
	s := &secretServers{plainB: httptest.NewServer(http.HandlerFunc(echo))}
	s.tlsA = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/to-http" {
			http.Redirect(w, r, s.plainB.URL+"/", http.StatusFound)
			return
		}
		if r.URL.Path == "/to-other-port" {
			http.Redirect(w, r, s.tlsC.URL+"/", http.StatusFound)
			return
		}
		echo(w, r)
	}))
	s.tlsC = httptest.NewTLSServer(http.HandlerFunc(echo))
	t.Cleanup(func() { s.tlsA.Close(); s.tlsC.Close(); s.plainB.Close() })
	return s
}

func port(s *httptest.Server) int {
	return int(netip.MustParseAddrPort(s.Listener.Addr().String()).Port())
}

// transport makes a Transport allowing the three servers, trusting their
// test certificate, with the given secrets.
func (s *secretServers) transport(t *testing.T, secrets map[string]http.Header, overHTTP bool) (*Transport, error) {
	p := &Policy{AllowPrivate: true, Secrets: secrets, SecretsOverHTTP: overHTTP}
	for _, srv := range []*httptest.Server{s.tlsA, s.tlsC, s.plainB} {
		p.Allow = append(p.Allow, Rule{Host: "127.0.0.1", Port: port(srv)})
	}
	tr, err := NewTransport(p)
	if err != nil {
		return nil, err
	}
	tr.rt.TLSClientConfig = s.tlsA.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	return tr, nil
}

func get(t *testing.T, tr *Transport, url string, header http.Header) string {
	t.Helper()
	body, err := do(tr, url, header)
	require.NoError(t, err)
	return body
}

// do GETs url through tr as an http.Client using it does (following
// redirects, each checked again) and returns the response's body.
func do(tr *Transport, url string, header http.Header) (string, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	maps.Copy(req.Header, header)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// TestSecretsGoOnlyToTheirOrigin: a secret keyed by an https origin is sent
// to that scheme, host and port only; not over plain http to the same host,
// not to another port, not along a redirect to either.
func TestSecretsGoOnlyToTheirOrigin(t *testing.T) {
	s := newSecretServers(t)
	tr, err := s.transport(t, map[string]http.Header{s.tlsA.URL: {"X-Key": {testSecret}}}, false)
	require.NoError(t, err)
	c := tr
	assert.Equal(t, testSecret, get(t, c, s.tlsA.URL+"/", http.Header{"X-Key": {"guest-guess"}}),
		"sent to the exact https origin, replacing the guest's")
	assert.Empty(t, get(t, c, s.plainB.URL+"/", nil), "not over http")
	assert.Empty(t, get(t, c, s.tlsC.URL+"/", nil), "not to another port")
	assert.Empty(t, get(t, c, s.tlsA.URL+"/to-http", nil), "not along a redirect to http")
	assert.Empty(t, get(t, c, s.tlsA.URL+"/to-other-port", nil), "not along a redirect to another port")

	// A key without a scheme is https on its default port: not sent to
	// the host over http (once, a bare host sent it to every port and
	// scheme).
	tr, err = s.transport(t, map[string]http.Header{"127.0.0.1": {"X-Key": {testSecret}}}, false)
	require.NoError(t, err)
	assert.Empty(t, get(t, tr, s.plainB.URL+"/", nil))
	assert.Empty(t, get(t, tr, s.tlsA.URL+"/", nil))
	tr, err = s.transport(t, map[string]http.Header{fmt.Sprintf("127.0.0.1:%d", port(s.tlsA)): {"X-Key": {testSecret}}}, false)
	require.NoError(t, err)
	assert.Equal(t, testSecret, get(t, tr, s.tlsA.URL+"/", nil))
	assert.Empty(t, get(t, tr, s.plainB.URL+"/", nil))
}

// TestSecretsOverHTTPNeedTheOptIn: an http origin is refused unless
// SecretsOverHTTP is set, and then the secret goes to that origin only.
func TestSecretsOverHTTPNeedTheOptIn(t *testing.T) {
	s := newSecretServers(t)
	secrets := map[string]http.Header{s.plainB.URL: {"X-Key": {testSecret}}}
	_, err := s.transport(t, secrets, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SecretsOverHTTP")
	tr, err := s.transport(t, secrets, true)
	require.NoError(t, err)
	c := tr
	assert.Equal(t, testSecret, get(t, c, s.plainB.URL+"/", nil))
	assert.Empty(t, get(t, c, s.tlsA.URL+"/", nil))
}

func TestSecretsKeysMustBeOrigins(t *testing.T) {
	for _, bad := range []string{"", "ftp://a.example", "https://a.example/path", "https://user@a.example",
		"https://a.example:0", "https://a.example:99999", "https://a.example/?q=1", "https://"} {
		err := (&Policy{Secrets: map[string]http.Header{bad: {"X": {"y"}}}}).Validate()
		assert.Error(t, err, bad)
	}
	err := (&Policy{Secrets: map[string]http.Header{
		"https://A.example": {"X": {"1"}}, "a.example:443": {"X": {"2"}},
	}}).Validate()
	assert.ErrorContains(t, err, "twice")
	for _, good := range []string{"a.example", "https://a.example", "https://a.example/", "[::1]:8443", "https://10.0.0.7:8443"} {
		assert.NoError(t, (&Policy{Secrets: map[string]http.Header{good: {"X": {"y"}}}}).Validate(), good)
	}
}
