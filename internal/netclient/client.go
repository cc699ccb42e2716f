// Package netclient makes the HTTP requests of one sandboxed run for the
// host-call server: through a netpolicy.Transport, which checks every
// request and address and adds the policy's secrets, it counts the run's
// requests against Policy.MaxRequests, follows at most MaxRedirects
// redirects, each checked again, bounds request and response bodies and the
// time of a request, and reads the whole response. A refusal is a
// *netpolicy.DeniedError.
package netclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/fumehood/fumehood/netpolicy"
)

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
	t        *netpolicy.Transport
	p        *netpolicy.Policy
	hc       *http.Client
	requests atomic.Int64
}

// New returns a Client of t with its own request count.
func New(t *netpolicy.Transport) *Client {
	c := &Client{t: t, p: t.Policy()}
	maxRedirects := c.p.MaxRedirects
	if maxRedirects == 0 {
		maxRedirects = netpolicy.DefaultMaxRedirects
	}
	c.hc = &http.Client{
		Transport: roundTripFunc(c.roundTrip),
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return &netpolicy.DeniedError{Method: req.Method, URL: redact(req.URL), Rule: "MaxRedirects",
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
	limit := c.p.MaxRequests
	if limit == 0 {
		limit = netpolicy.DefaultMaxRequests
	}
	if c.requests.Load() >= int64(limit) {
		return nil, &netpolicy.DeniedError{Method: req.Method, URL: redact(req.URL), Rule: "MaxRequests",
			Reason: fmt.Sprintf("this run already made %d requests", limit)}
	}
	if err := c.p.Check(req.Method, req.URL); err != nil {
		return nil, err
	}
	c.requests.Add(1)
	resp, err := c.t.RoundTrip(req)
	var de *netpolicy.DeniedError
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
// A refusal is a *netpolicy.DeniedError (errors.Is(err, netpolicy.ErrDenied)).
func (c *Client) Do(ctx context.Context, r *Request) (*Response, error) {
	p := c.p
	maxReq, maxResp := p.MaxRequestBytes, p.MaxResponseBytes
	if maxReq == 0 {
		maxReq = netpolicy.DefaultMaxRequestBytes
	}
	if maxResp == 0 {
		maxResp = netpolicy.DefaultMaxResponseBytes
	}
	method := strings.ToUpper(r.Method)
	if method == "" {
		method = http.MethodGet
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = netpolicy.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if int64(len(r.Body)) > maxReq {
		return nil, &netpolicy.DeniedError{Method: method, URL: redact(req.URL), Rule: "MaxRequestBytes",
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
		var de *netpolicy.DeniedError
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
	tooLarge := &netpolicy.DeniedError{Method: method, URL: final, Rule: "MaxResponseBytes",
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

// redact is u without its query, fragment and user information: how a
// DeniedError names a URL (as netpolicy's own refusals do).
func redact(u *url.URL) string {
	c := *u
	c.RawQuery, c.Fragment, c.RawFragment, c.User = "", "", "", nil
	return c.String()
}
