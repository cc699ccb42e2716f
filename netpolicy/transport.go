package netpolicy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// MaxResponseHeaderBytes bounds the header of a response the Transport
// reads (net/http's default is 10 MiB); a larger one fails the request.
const MaxResponseHeaderBytes = 64 << 10

// Transport is an http.RoundTripper that makes only the requests a Policy
// allows: it checks every request against the rules, resolves the host
// itself, checks each address, dials the address it checked, and adds the
// policy's secret headers. Because it checks each request it sends, an
// http.Client using it re-checks every redirect hop. It never uses a proxy
// from the environment. A Transport is safe for concurrent use and keeps
// connections alive between requests, so make one per policy and reuse it.
type Transport struct {
	p       *Policy
	rt      *http.Transport
	secrets map[string]http.Header // by origin
	// dialContext connects to a checked address; tests replace it to see
	// what would be dialed.
	dialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewTransport makes a Transport enforcing p, which must stay unchanged.
func NewTransport(p *Policy) (*Transport, error) {
	if p == nil {
		p = &Policy{}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	secrets, err := p.secretsByOrigin()
	if err != nil {
		return nil, err
	}
	t := &Transport{p: p, secrets: secrets, dialContext: (&net.Dialer{}).DialContext}
	t.rt = &http.Transport{
		Proxy:                  nil, // never a proxy from the environment
		DialContext:            t.dial,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           16,
		IdleConnTimeout:        30 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  0, // the request's context bounds it
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
	}
	return t, nil
}

// Policy returns the policy t enforces.
func (t *Transport) Policy() *Policy { return t.p }

// CloseIdleConnections closes the connections kept alive.
func (t *Transport) CloseIdleConnections() { t.rt.CloseIdleConnections() }

// RoundTrip checks req against the policy and sends it with the secret
// headers of its origin (scheme, host and port). It does not follow
// redirects.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.p.Check(req.Method, req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if secret := t.secrets[origin(req.URL)]; len(secret) > 0 {
		req = req.Clone(req.Context()) // the caller's request never holds them
		for k, vs := range secret {
			req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	return t.rt.RoundTrip(req)
}

// dial resolves addr's host, keeps the addresses the policy allows and
// connects to the first that answers.
func (t *Transport) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if t.p.Resolve != nil {
		ips, err = t.p.Resolve(ctx, host)
		if err != nil {
			return nil, err
		}
	} else {
		ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
	}
	var refused error
	var lastErr error
	for _, ip := range ips {
		if err := t.p.CheckAddr(ip); err != nil {
			if host != ip.String() {
				err.(*DeniedError).Reason = host + " resolves to " + err.(*DeniedError).Reason
			}
			refused = err
			continue
		}
		// Dial the address that was checked, never the name again.
		c, err := t.dialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, lastErr
	}
	if refused != nil {
		return nil, refused
	}
	return nil, fmt.Errorf("netpolicy: %s has no address", host)
}
