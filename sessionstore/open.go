package sessionstore

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
)

// Opener opens a Backend for a store URL of its scheme; see Register.
type Opener func(ctx context.Context, u *url.URL, opts *Options) (Backend, error)

var (
	openersMu sync.Mutex
	openers   = map[string]Opener{}
)

// Register makes Open handle URLs of a scheme; package natsstore registers
// "nats" when imported. Registering a scheme twice panics, as
// database/sql.Register does.
func Register(scheme string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[scheme]; dup || scheme == "file" {
		panic("sessionstore: Register of scheme " + scheme + " twice")
	}
	openers[scheme] = open
}

// Open returns the store at a URL: a directory path or file:///path (the
// directory backend), or the URL of a registered scheme, such as
// nats://host:port?heads=...&objects=...&replicas=N once package natsstore
// is imported. opts configures the store (nil: the defaults).
func Open(ctx context.Context, rawURL string, opts *Options) (Store, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("sessionstore: no store URL: give a directory or nats://host:port")
	}
	scheme, _, found := strings.Cut(rawURL, "://")
	if !found {
		return openDir(rawURL, opts)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: the store URL: %w", err)
	}
	if scheme == "file" {
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("sessionstore: %q: a file URL names a local directory, file:///path", rawURL)
		}
		return openDir(u.Path, opts)
	}
	openersMu.Lock()
	open := openers[scheme]
	openersMu.Unlock()
	if open == nil {
		hint := ""
		if scheme == "nats" {
			hint = " (import github.com/fumehood/fumehood/sessionstore/natsstore)"
		}
		return nil, fmt.Errorf("sessionstore: unknown store URL scheme %q%s: use a directory, file:///path or nats://host:port", scheme, hint)
	}
	b, err := open(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	s, err := New(b, opts)
	if err != nil {
		b.Close()
		return nil, err
	}
	return s, nil
}

func openDir(path string, opts *Options) (Store, error) {
	d, err := OpenDir(path)
	if err != nil {
		return nil, err
	}
	return New(d, opts)
}
