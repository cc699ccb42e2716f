package netpolicy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
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

// Request is an HTTP request a guest asks for.
type Request struct {
	Method string
	URL    string
	Header http.Header
	Body   []byte
}

// Response is the final response to a Request, after redirects.
type Response struct {
	// URL is the final URL, after redirects.
	URL        string
	StatusCode int
	Status     string
	Header     http.Header
	Body       []byte
}

// Client makes the requests of one run: it counts them against
// MaxRequests, follows at most MaxRedirects redirects, each checked again,
// and bounds request and response bodies. It is safe for concurrent use.
type Client struct {
	t        *Transport
	hc       *http.Client
	requests atomic.Int64
}

// NewClient returns a Client with its own request count.
func (t *Transport) NewClient() *Client {
	c := &Client{t: t}
	maxRedirects := t.p.MaxRedirects
	if maxRedirects == 0 {
		maxRedirects = DefaultMaxRedirects
	}
	c.hc = &http.Client{
		Transport: roundTripFunc(c.roundTrip),
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return &DeniedError{Method: req.Method, URL: redact(req.URL), Rule: "MaxRedirects",
					Reason: fmt.Sprintf("more than %d redirects", max(maxRedirects, 0))}
			}
			return nil
		},
	}
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	limit := c.t.p.MaxRequests
	if limit == 0 {
		limit = DefaultMaxRequests
	}
	if c.requests.Load() >= int64(limit) {
		return nil, &DeniedError{Method: req.Method, URL: redact(req.URL), Rule: "MaxRequests",
			Reason: fmt.Sprintf("this run already made %d requests", limit)}
	}
	if err := c.t.p.Check(req.Method, req.URL); err != nil {
		return nil, err
	}
	c.requests.Add(1)
	resp, err := c.t.RoundTrip(req)
	var de *DeniedError
	if errors.As(err, &de) {
		c.requests.Add(-1) // refused at dialing: nothing was sent
	}
	return resp, err
}

// Requests returns how many requests the client sent (redirect hops
// included; refused requests, even those refused only after resolving the
// host's name, are not counted).
func (c *Client) Requests() int { return int(c.requests.Load()) }

// Do makes req, following redirects, and reads the whole response body.
// A refusal is a *DeniedError (errors.Is(err, ErrDenied)).
func (c *Client) Do(ctx context.Context, r *Request) (*Response, error) {
	p := c.t.p
	maxReq, maxResp := p.MaxRequestBytes, p.MaxResponseBytes
	if maxReq == 0 {
		maxReq = DefaultMaxRequestBytes
	}
	if maxResp == 0 {
		maxResp = DefaultMaxResponseBytes
	}
	method := strings.ToUpper(r.Method)
	if method == "" {
		method = http.MethodGet
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if int64(len(r.Body)) > maxReq {
		return nil, &DeniedError{Method: method, URL: redact(req.URL), Rule: "MaxRequestBytes",
			Reason: fmt.Sprintf("a body of %d bytes, the limit is %d", len(r.Body), maxReq)}
	}
	if len(r.Body) == 0 {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	}
	for k, vs := range r.Header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var de *DeniedError
		if errors.As(err, &de) {
			if de.URL == "" { // refused at dialing: name the request
				de.Method, de.URL = method, redact(req.URL)
			}
			return nil, de
		}
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	defer resp.Body.Close()
	final := redact(resp.Request.URL)
	tooLarge := &DeniedError{Method: method, URL: final, Rule: "MaxResponseBytes",
		Reason: fmt.Sprintf("the response is larger than %d bytes", maxResp)}
	if resp.ContentLength > maxResp {
		return nil, tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResp+1))
	if err != nil {
		return nil, fmt.Errorf("netpolicy: reading the response: %w", err)
	}
	if int64(len(body)) > maxResp {
		return nil, tooLarge
	}
	return &Response{URL: resp.Request.URL.String(), StatusCode: resp.StatusCode, Status: resp.Status,
		Header: resp.Header, Body: body}, nil
}
