package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	p := &Policy{Allow: []Rule{
		{Scheme: "https", Host: "api.example.com", Methods: []string{"GET"}},
		{Host: "*.wiki.example"},
		{Scheme: "http", Host: "10.1.2.3", Port: 8080},
	}}
	require.NoError(t, p.Validate())
	for _, tc := range []struct {
		method, url string
		ok          bool
	}{
		{"GET", "https://api.example.com/v1", true},
		{"GET", "https://API.Example.com./v1", true},
		{"POST", "https://api.example.com/v1", false},
		{"GET", "http://api.example.com/v1", false},
		{"GET", "https://api.example.com:8443/v1", false},
		{"GET", "https://evil.com/?h=api.example.com", false},
		{"GET", "https://api.example.com.evil.com/", false},
		{"DELETE", "http://en.wiki.example/", true},
		{"GET", "https://a.b.wiki.example/", true},
		{"GET", "https://wiki.example/", false},
		{"GET", "https://xwiki.example/", false},
		{"GET", "http://10.1.2.3:8080/", true},
		{"GET", "http://10.1.2.3/", false},
		{"GET", "ftp://api.example.com/", false},
		{"GET", "https://user:pw@api.example.com/", false},
	} {
		u, err := url.Parse(tc.url)
		require.NoError(t, err)
		err = p.Check(tc.method, u)
		if tc.ok {
			assert.NoError(t, err, "%s %s", tc.method, tc.url)
		} else {
			assert.ErrorIs(t, err, ErrDenied, "%s %s", tc.method, tc.url)
		}
	}
	u, _ := url.Parse("https://x.example/?token=s3cret")
	err := (&Policy{}).Check("GET", u)
	var de *DeniedError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "allow-list", de.Rule)
	assert.NotContains(t, err.Error(), "s3cret", "queries are not repeated in errors")
}

func TestValidate(t *testing.T) {
	for _, r := range []Rule{{Host: ""}, {Host: "a.*.com"}, {Host: "*x.com"}, {Scheme: "ftp", Host: "a"}, {Host: "a", Port: 70000}} {
		assert.Error(t, (&Policy{Allow: []Rule{r}}).Validate(), "%+v", r)
	}
	assert.NoError(t, (&Policy{Allow: []Rule{{Host: "*"}, {Host: "*.a.com", Port: 1}}}).Validate())
}

// TestCheckAddr: with AllowPrivate off, every address whose entry in
// IANA's special-purpose registries is not globally reachable is refused,
// with its kind in the reason, and so is every IPv6 form carrying one; the
// globally reachable entries inside refused blocks and ordinary public
// addresses pass. AllowPrivate lets all of them through.
func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		kind string // "" for an address that passes
	}{
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.0.0.1", "private"},
		{"172.16.5.4", "private"},
		{"192.168.1.1", "private"},
		{"fd00::1", "private"},
		{"100.64.0.1", "private"}, // shared address space
		{"100.127.255.255", "private"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"239.1.2.3", "multicast"},
		{"224.0.0.1", "link-local"},
		{"ff05::1", "multicast"},
		{"ff02::1", "link-local"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"254.255.255.254", "reserved"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"192.0.0.1", "IETF-reserved"},
		{"192.0.0.8", "IETF-reserved"},   // dummy address
		{"192.0.0.170", "IETF-reserved"}, // NAT64/DNS64 discovery
		{"192.0.2.1", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"fec0::1", "site-local"},
		{"feff:ffff::1", "site-local"},
		{"100::1", "discard-only"},
		{"100:0:0:1::1", "dummy"},
		{"2001:1::4", "IETF-reserved"},
		{"2001:10::1", "IETF-reserved"}, // deprecated ORCHID
		{"2001:100::1", "IETF-reserved"},
		{"2001:2::1", "benchmarking"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"5f00::1", "SRv6 SID"},
		{"::ffff:198.18.0.1", "benchmarking"},                     // IPv4-mapped
		{"::ffff:192.0.0.1", "IETF-reserved"},                     // IPv4-mapped
		{"2002:f000:1::1", "reserved"},                            // 6to4 of 240.0.0.1
		{"2002:c000:201::1", "documentation"},                     // 6to4 of 192.0.2.1
		{"2002:c612:1::1", "benchmarking"},                        // 6to4 of 198.18.0.1
		{"64:ff9b::ffff:ffff", "broadcast"},                       // NAT64 of 255.255.255.255
		{"2001:0:c612:1:8000:63bf:a247:27dd", "benchmarking"},     // Teredo, server 198.18.0.1
		{"2001:0:4136:e378:8000:63bf:34ff:8efa", "documentation"}, // Teredo, client 203.0.113.5
		{"93.184.216.34", ""},
		{"2606:4700::1111", ""},
		{"100.128.0.1", ""},
		{"198.20.0.1", ""},
		{"192.0.3.1", ""},
		{"192.0.0.9", ""},    // PCP anycast, globally reachable
		{"192.0.0.10", ""},   // TURN anycast, globally reachable
		{"192.31.196.1", ""}, // AS112
		{"192.88.99.1", ""},  // deprecated 6to4 relay anycast
		{"2001:1::1", ""},    // PCP anycast
		{"2001:1::3", ""},    // DNS-SD SRP anycast
		{"2001:3::1", ""},    // AMT
		{"2001:4:112::1", ""},
		{"2001:20::1", ""}, // ORCHIDv2
		{"2001:30::1", ""}, // DRIP
		{"2001:200::1", ""},
		{"2001:0:4136:e378:8000:63bf:a247:27dd", ""}, // Teredo of public addresses
		{"64:ff9b::5db8:d822", ""},                   // NAT64 of 93.184.216.34
	} {
		err := (&Policy{}).CheckAddr(netip.MustParseAddr(tc.addr))
		if tc.kind == "" {
			assert.NoError(t, err, tc.addr)
			continue
		}
		var de *DeniedError
		if assert.ErrorAs(t, err, &de, tc.addr) {
			assert.Equal(t, "AllowPrivate", de.Rule, tc.addr)
			assert.Contains(t, de.Reason, " is "+tc.kind, tc.addr)
		}
		assert.ErrorIs(t, err, ErrDenied, tc.addr)
		assert.NoError(t, (&Policy{AllowPrivate: true}).CheckAddr(netip.MustParseAddr(tc.addr)), tc.addr)
	}
}

func TestParseHostRule(t *testing.T) {
	for in, want := range map[string]Rule{
		"example.com":      {Host: "example.com"},
		"Example.com:8080": {Host: "example.com", Port: 8080},
		"*.example.com":    {Host: "*.example.com"},
		"[::1]:9000":       {Host: "::1", Port: 9000},
		"127.0.0.1":        {Host: "127.0.0.1"},
	} {
		got, err := ParseHostRule(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "a.com:0", "a.com:x", "http://a.com", "a.com:99999"} {
		_, err := ParseHostRule(bad)
		assert.Error(t, err, bad)
	}
}

func TestTransportDialsOnlyCheckedAddresses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	port := netip.MustParseAddrPort(srv.Listener.Addr().String()).Port()
	p := &Policy{
		Allow:           []Rule{{Host: "svc.test", Port: int(port)}, {Host: "127.0.0.1", Port: int(port)}},
		AllowPrivate:    true,
		Secrets:         map[string]http.Header{fmt.Sprintf("http://svc.test:%d", port): {"Authorization": {"Bearer host-only"}}},
		SecretsOverHTTP: true,
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	}
	tr, err := NewTransport(p)
	require.NoError(t, err)
	assert.Equal(t, "Bearer host-only", get(t, tr, fmt.Sprintf("http://svc.test:%d/", port), nil), "the secret is added for its host")
	assert.Empty(t, get(t, tr, srv.URL, nil), "and not for another")

	// Without AllowPrivate, a rebinding answer (one public and one
	// loopback address) is never dialed at the loopback address.
	p2 := *p
	p2.AllowPrivate = false
	p2.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}, nil
	}
	tr2, err := NewTransport(&p2)
	require.NoError(t, err)
	_, err = do(tr2, fmt.Sprintf("http://svc.test:%d/", port), nil)
	var de *DeniedError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "AllowPrivate", de.Rule)
	assert.Contains(t, de.Reason, "svc.test resolves to")
}

// TestResponseHeaderIsBounded: a server answering with a huge header fails
// the request instead of making the host hold it (net/http's default bound
// is 10 MiB).
func TestResponseHeaderIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("h", 2*MaxResponseHeaderBytes))
	}))
	defer srv.Close()
	tr, err := NewTransport(&Policy{Allow: []Rule{{Host: "127.0.0.1", Port: port(srv)}}, AllowPrivate: true})
	require.NoError(t, err)
	_, err = do(tr, srv.URL, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "header")
}

// TestEmbeddedPrivateIPv4IsNeverDialed: with an allow-all rule and
// AllowPrivate off, an IPv6 address that carries a private IPv4 one
// (NAT64, 6to4, Teredo, IPv4-compatible, IPv4-translated, IPv4-mapped) is
// refused before anything is dialed, whether the guest names it in the URL
// or a name resolves to it; the same forms carrying a public IPv4 address
// are dialed.
func TestEmbeddedPrivateIPv4IsNeverDialed(t *testing.T) {
	for _, tc := range []struct {
		addr string
		kind string // "" for an address that must be dialed
	}{
		{"64:ff9b::a00:1", "private"},           // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", "loopback"},         // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", "link-local"},    // NAT64 of 169.254.169.254
		{"64:ff9b:1::a00:1", "local-use NAT64"}, // RFC 8215 prefix, whatever it embeds
		{"64:ff9b:1::5db8:d822", "local-use NAT64"},
		{"2002:c0a8:101::1", "private"},                     // 6to4 of 192.168.1.1
		{"2002:7f00:1::", "loopback"},                       // 6to4 of 127.0.0.1
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"}, // Teredo, client 10.0.0.1
		{"2001:0:a00:1:8000:63bf:a247:2bdd", "private"},     // Teredo, server 10.0.0.1
		{"::a00:1", "private"},                              // IPv4-compatible 10.0.0.1
		{"::ffff:0:a9fe:a9fe", "link-local"},                // IPv4-translated 169.254.169.254
		{"::ffff:10.0.0.1", "private"},                      // IPv4-mapped
		{"64:ff9b::a00:1%eth0", "private"},                  // a zone does not hide it
		{"64:ff9b::5db8:d822", ""},                          // NAT64 of 93.184.216.34
		{"2002:5db8:d822::1", ""},                           // 6to4 of 93.184.216.34
		{"2001:0:4136:e378:8000:63bf:a247:2bdd", ""},        // Teredo, client 93.184.212.34
		{"::5db8:d822", ""},                                 // IPv4-compatible 93.184.216.34
	} {
		ip := netip.MustParseAddr(tc.addr)
		for _, via := range []string{"name", "literal"} {
			var dialed []string
			p := &Policy{
				Allow: []Rule{{Host: "*"}},
				Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
					return []netip.Addr{ip}, nil
				},
			}
			tr, err := NewTransport(p)
			require.NoError(t, err)
			tr.dialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dialed = append(dialed, addr)
				return nil, errors.New("fake dialer: not connecting")
			}
			u := "http://svc.test/"
			if via == "literal" {
				u = "http://" + net.JoinHostPort(strings.ReplaceAll(ip.String(), "%", "%25"), "80") + "/"
			}
			_, err = do(tr, u, nil)
			if tc.kind == "" {
				assert.NotErrorIs(t, err, ErrDenied, "%s via %s", tc.addr, via)
				assert.Equal(t, []string{net.JoinHostPort(ip.String(), "80")}, dialed, "%s via %s is dialed", tc.addr, via)
				continue
			}
			var de *DeniedError
			if assert.ErrorAs(t, err, &de, "%s via %s", tc.addr, via) {
				assert.Equal(t, "AllowPrivate", de.Rule)
				assert.Contains(t, de.Reason, tc.kind, tc.addr)
			}
			assert.Empty(t, dialed, "%s via %s: nothing is dialed", tc.addr, via)
		}
	}
}
