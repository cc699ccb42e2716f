// Package netpolicy decides which HTTP requests a sandboxed guest may make,
// and its Transport makes them for it.
//
// A guest has no sockets: it asks the host to make a request, and the host
// makes it only if a Policy allows it. The default is to deny everything;
// each Rule of Policy.Allow opens one scheme, host pattern, port and set of
// methods:
//
//	p := &netpolicy.Policy{Allow: []netpolicy.Rule{
//		{Scheme: "https", Host: "api.example.com", Methods: []string{"GET", "POST"}},
//		{Host: "*.wikipedia.org"},
//	}}
//
// Every request is checked again at each redirect hop. Host names are
// resolved by the host and every address is checked after resolution:
// addresses that are not globally reachable (loopback, link-local,
// private, multicast, reserved and the like, and IPv6 addresses embedding
// such an IPv4 one) are refused unless AllowPrivate is set, and the
// connection is made to the
// address that was checked, so a name that resolves differently the second
// time (DNS rebinding) cannot slip through. Secret headers (API keys) are
// added by the host for the origins (https, host and port) they belong
// to; the guest never sees them. A refusal is a *DeniedError naming the
// rule that refused it.
package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults applied when a Policy leaves a limit zero.
const (
	DefaultMaxRequestBytes  = 1 << 20
	DefaultMaxResponseBytes = 10 << 20
	DefaultMaxRequests      = 100
	DefaultMaxRedirects     = 10
	DefaultTimeout          = 30 * time.Second
)

// Policy says which HTTP requests a guest may make. The zero value allows
// none. A Policy must not be changed while a Transport made from it is in use.
type Policy struct {
	// Allow lists what may be requested; a request must match one rule.
	Allow []Rule
	// AllowPrivate lets requests reach addresses that are not globally
	// reachable: loopback, link-local, private (RFC 1918, RFC 4193, shared
	// address space, local-use NAT64), unspecified, multicast, broadcast,
	// reserved (240.0.0.0/4), documentation, benchmarking, discard-only,
	// site-local and the rest of IANA's special-purpose registries whose
	// "Globally Reachable" column says false. Off, such addresses are
	// refused even when a rule allows the host name, and so are the IPv6
	// forms that carry such an IPv4 address: IPv4-mapped, NAT64
	// (64:ff9b::/96), 6to4, Teredo (server or client), IPv4-compatible and
	// IPv4-translated.
	AllowPrivate bool
	// MaxRequestBytes bounds a request's body; 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// MaxResponseBytes bounds a response's body; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// MaxRequests bounds the requests of one run, each redirect hop
	// counting as one; 0 means DefaultMaxRequests.
	MaxRequests int
	// MaxRedirects bounds the redirects followed for one request; 0 means
	// DefaultMaxRedirects and a negative value follows none.
	MaxRedirects int
	// Timeout bounds one request, redirects included, within the caller's
	// context; 0 means DefaultTimeout.
	Timeout time.Duration
	// Secrets holds headers the host adds to every request to an origin,
	// replacing any the guest set under the same names. A key is an
	// origin, "https://api.example.com" or "https://api.example.com:8443";
	// a key without a scheme ("api.example.com", "10.0.0.7:8443") means
	// https, and without a port the scheme's default one. The headers go
	// to that scheme, host and port only: not over plain http to the same
	// host, not to its other ports, not along a redirect to another
	// origin. The guest never sees them. An http origin is refused unless
	// SecretsOverHTTP is set.
	Secrets map[string]http.Header
	// SecretsOverHTTP allows Secrets keys with the http scheme, whose
	// headers then travel unencrypted (for a service on a trusted network
	// or loopback).
	SecretsOverHTTP bool
	// Resolve looks up a host name's addresses; nil means
	// net.DefaultResolver. Tests use it to fake names.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Rule allows requests to one host pattern.
type Rule struct {
	// Scheme is "http" or "https"; empty allows both.
	Scheme string
	// Host is a host name (matched without regard to case), an IP
	// address, "*.example.com" for every name below example.com (but not
	// example.com itself), or "*" for every host.
	Host string
	// Port is the allowed port; 0 means the scheme's default port (80 for
	// http, 443 for https).
	Port int
	// Methods are the allowed HTTP methods (upper case); empty allows all.
	Methods []string
}

// String describes the rule, as a DeniedError names it.
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString("allow ")
	if r.Scheme == "" {
		b.WriteString("http(s)")
	} else {
		b.WriteString(r.Scheme)
	}
	b.WriteString("://")
	b.WriteString(r.Host)
	if r.Port != 0 {
		b.WriteString(":" + strconv.Itoa(r.Port))
	}
	if len(r.Methods) > 0 {
		b.WriteString(" " + strings.Join(r.Methods, ","))
	}
	return b.String()
}

// ParseHostRule parses the command line's HOST[:PORT] (or [IPv6]:PORT)
// into a Rule allowing every method over http and https. Without a port
// the schemes' default ports are allowed.
func ParseHostRule(s string) (Rule, error) {
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return Rule{}, fmt.Errorf("netpolicy: invalid port in %q", s)
		}
		host, port = h, n
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" || strings.ContainsAny(host, "/@?#: ") && !isIP(host) {
		return Rule{}, fmt.Errorf("netpolicy: invalid host %q (want HOST or HOST:PORT)", s)
	}
	return Rule{Host: host, Port: port}, nil
}

func isIP(s string) bool { _, err := netip.ParseAddr(s); return err == nil }

// ErrDenied matches every refusal: errors.Is(err, ErrDenied).
var ErrDenied = errors.New("netpolicy: request refused")

// DeniedError reports a request the policy refused, and which rule refused it.
type DeniedError struct {
	// Method and URL are the request's (the hop's, after a redirect).
	Method, URL string
	// Rule names what refused the request: "allow-list" (no rule matched),
	// "AllowPrivate", "MaxRequests", "MaxRequestBytes", "MaxResponseBytes"
	// or "MaxRedirects".
	Rule string
	// Reason says why, in words.
	Reason string
}

// Error implements error.
func (e *DeniedError) Error() string {
	if e.URL == "" {
		return fmt.Sprintf("netpolicy: refused by %s: %s", e.Rule, e.Reason)
	}
	return fmt.Sprintf("netpolicy: %s %s refused by %s: %s", e.Method, e.URL, e.Rule, e.Reason)
}

// Is makes a DeniedError match ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Validate reports a policy whose rules cannot match anything sensible.
func (p *Policy) Validate() error {
	for _, r := range p.Allow {
		if r.Scheme != "" && r.Scheme != "http" && r.Scheme != "https" {
			return fmt.Errorf("netpolicy: rule %q: scheme must be http, https or empty", r)
		}
		if r.Host == "" || strings.Contains(r.Host[1:], "*") || strings.HasPrefix(r.Host, "*") && r.Host != "*" && !strings.HasPrefix(r.Host, "*.") {
			return fmt.Errorf("netpolicy: rule %q: host must be a name, an address, *.domain or *", r)
		}
		if r.Port < 0 || r.Port > 65535 {
			return fmt.Errorf("netpolicy: rule %q: port out of range", r)
		}
	}
	if p.MaxRequestBytes < 0 || p.MaxResponseBytes < 0 || p.MaxRequests < 0 {
		return errors.New("netpolicy: negative limit")
	}
	_, err := p.secretsByOrigin()
	return err
}

// secretsByOrigin returns Secrets keyed by canonical origin (see origin).
func (p *Policy) secretsByOrigin() (map[string]http.Header, error) {
	out := make(map[string]http.Header, len(p.Secrets))
	for key, h := range p.Secrets {
		raw := key
		if !strings.Contains(raw, "://") {
			raw = "https://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
			(u.Path != "" && u.Path != "/") || effectivePort(u) <= 0 || effectivePort(u) > 65535 {
			return nil, fmt.Errorf("netpolicy: secrets key %q is not an origin (https://HOST[:PORT])", key)
		}
		switch {
		case u.Scheme == "http" && !p.SecretsOverHTTP:
			return nil, fmt.Errorf("netpolicy: secrets key %q would send them over plain http; set SecretsOverHTTP to allow it", key)
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("netpolicy: secrets key %q: scheme must be https (or http)", key)
		}
		o := origin(u)
		if _, dup := out[o]; dup {
			return nil, fmt.Errorf("netpolicy: secrets key %q names the origin %s twice", key, o)
		}
		out[o] = h
	}
	return out, nil
}

// origin is u's scheme, host and port in one canonical form:
// "https://api.example.com:443", "http://[::1]:8080".
func origin(u *url.URL) string {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(host, strconv.Itoa(effectivePort(u)))
}

// Check reports whether a rule allows method on u, without resolving the
// host: nil, or a *DeniedError.
func (p *Policy) Check(method string, u *url.URL) error {
	deny := func(reason string) error {
		return &DeniedError{Method: method, URL: redact(u), Rule: "allow-list", Reason: reason}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return deny(fmt.Sprintf("scheme %q is not http or https", u.Scheme))
	}
	if u.User != nil {
		return deny("credentials in the URL are not allowed")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := effectivePort(u)
	for _, r := range p.Allow {
		if r.matches(u.Scheme, host, port, method) {
			return nil
		}
	}
	return deny(fmt.Sprintf("no rule allows %s %s://%s:%d (the default is to deny)", method, u.Scheme, host, port))
}

func (r Rule) matches(scheme, host string, port int, method string) bool {
	if r.Scheme != "" && r.Scheme != scheme {
		return false
	}
	want := r.Port
	if want == 0 {
		want = defaultPort(scheme)
	}
	if want != port {
		return false
	}
	if len(r.Methods) > 0 && !slices.Contains(r.Methods, method) {
		return false
	}
	pattern := strings.TrimSuffix(strings.ToLower(r.Host), ".")
	switch {
	case pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*."):
		return strings.HasSuffix(host, pattern[1:]) && len(host) > len(pattern)-1
	default:
		if a, err := netip.ParseAddr(pattern); err == nil {
			b, err := netip.ParseAddr(host)
			return err == nil && a.Unmap() == b.Unmap()
		}
		return pattern == host
	}
}

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

func effectivePort(u *url.URL) int {
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return -1
		}
		return n
	}
	return defaultPort(u.Scheme)
}

// CheckAddr reports whether a connection to ip may be made: nil, or a
// *DeniedError naming AllowPrivate.
func (p *Policy) CheckAddr(ip netip.Addr) error {
	if p.AllowPrivate {
		return nil
	}
	if kind := privateKind(ip); kind != "" {
		return &DeniedError{Rule: "AllowPrivate", Reason: fmt.Sprintf("address %s is %s and AllowPrivate is off", ip, kind)}
	}
	return nil
}

// IPv6 forms that carry an IPv4 address a translator, tunnel or the host's
// own stack may deliver to (see embeddedIPv4).
var (
	nat64        = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052, well-known prefix
	sixToFour    = netip.MustParsePrefix("2002::/16")       // RFC 3056
	teredo       = netip.MustParsePrefix("2001::/32")       // RFC 4380
	v4Compatible = netip.MustParsePrefix("::/96")           // RFC 4291 2.5.5.1, deprecated
	v4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 (SIIT)
)

// special is the IANA IPv4 and IPv6 Special-Purpose Address Registries
// (RFC 6890 and its updates), plus multicast and the deprecated IPv6
// site-local prefix, which those registries do not list. An address is
// judged by its longest matching entry, and refused when that entry's
// "Globally Reachable" column says false; an entry marked true inside a
// refused block (the anycast addresses in 192.0.0.0/24 and 2001::/23) is
// listed so that it stays reachable, and addresses no entry holds are
// global. Entries whose column says N/A: Teredo (2001::/32) is judged by
// the IPv4 addresses it carries (see embeddedIPv4), as are 6to4
// (2002::/16, N/A) and IPv4-mapped addresses (::ffff:0:0/96, false in the
// registry, but the host's stack sends them to their IPv4 address, so they
// are unmapped and judged as that); the deprecated ORCHID prefix
// (2001:10::/28) is not routable (RFC 4843) and is refused with its block;
// the deprecated 6to4 relay anycast (192.88.99.0/24) is public anycast and
// is dialed. Names are the kinds errors report.
var special = []struct {
	prefix netip.Prefix
	kind   string // "" for an entry that is globally reachable
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},                    // RFC 791: "this network"; 0.0.0.0 reaches the host itself
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},                       // RFC 1918
	{netip.MustParsePrefix("100.64.0.0/10"), "private"},                    // RFC 6598, shared address space (carrier-grade NAT)
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},                     // RFC 1122
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},                // RFC 3927
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},                    // RFC 1918
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF-reserved"},               // RFC 6890: service continuity, dummy, NAT64 discovery
	{netip.MustParsePrefix("192.0.0.9/32"), ""},                            // RFC 7723, PCP anycast: globally reachable
	{netip.MustParsePrefix("192.0.0.10/32"), ""},                           // RFC 8155, TURN anycast: globally reachable
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},               // RFC 5737, TEST-NET-1
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},                   // RFC 1918
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},               // RFC 2544
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},            // RFC 5737, TEST-NET-2
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},             // RFC 5737, TEST-NET-3
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},                    // RFC 5771
	{netip.MustParsePrefix("224.0.0.0/24"), "link-local"},                  // RFC 5771, link-local multicast
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},                     // RFC 1112
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},             // RFC 919, limited broadcast
	{netip.MustParsePrefix("::/128"), "unspecified"},                       // RFC 4291
	{netip.MustParsePrefix("::1/128"), "loopback"},                         // RFC 4291
	{netip.MustParsePrefix("64:ff9b:1::/48"), "private (local-use NAT64)"}, // RFC 8215; where the IPv4 address sits depends on the operator's prefix length
	{netip.MustParsePrefix("100::/64"), "discard-only"},                    // RFC 6666
	{netip.MustParsePrefix("100:0:0:1::/64"), "dummy"},                     // RFC 9780
	{netip.MustParsePrefix("2001::/23"), "IETF-reserved"},                  // RFC 2928
	{netip.MustParsePrefix("2001::/32"), ""},                               // RFC 4380, Teredo: judged by what it carries
	{netip.MustParsePrefix("2001:1::1/128"), ""},                           // RFC 7723, PCP anycast
	{netip.MustParsePrefix("2001:1::2/128"), ""},                           // RFC 8155, TURN anycast
	{netip.MustParsePrefix("2001:1::3/128"), ""},                           // RFC 9665, DNS-SD SRP anycast
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking"},                 // RFC 5180
	{netip.MustParsePrefix("2001:3::/32"), ""},                             // RFC 7450, AMT
	{netip.MustParsePrefix("2001:4:112::/48"), ""},                         // RFC 7535, AS112-v6
	{netip.MustParsePrefix("2001:20::/28"), ""},                            // RFC 7343, ORCHIDv2
	{netip.MustParsePrefix("2001:30::/28"), ""},                            // RFC 9374, DRIP entity tags
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},              // RFC 3849
	{netip.MustParsePrefix("3fff::/20"), "documentation"},                  // RFC 9637
	{netip.MustParsePrefix("5f00::/16"), "SRv6 SID"},                       // RFC 9602, segment routing identifiers
	{netip.MustParsePrefix("fc00::/7"), "private"},                         // RFC 4193, unique local
	{netip.MustParsePrefix("fe80::/10"), "link-local"},                     // RFC 4291
	{netip.MustParsePrefix("fec0::/10"), "site-local"},                     // RFC 3879, deprecated, still routed within a site
	{netip.MustParsePrefix("ff00::/8"), "multicast"},                       // RFC 4291
	{netip.MustParsePrefix("ff02::/16"), "link-local"},                     // RFC 4291, link-local multicast
}

// privateKind says which class of non-public address ip is, or "". An
// IPv6 address that embeds an IPv4 address the network may deliver to
// (NAT64, 6to4, Teredo, IPv4-compatible, IPv4-translated; IPv4-mapped ones
// are unmapped) is judged by its IPv4 address too, and the local-use NAT64
// prefix, where the IPv4 address's position depends on the operator's
// prefix length, is private as a whole.
func privateKind(ip netip.Addr) string {
	ip = ip.Unmap()
	if kind := ownKind(ip); kind != "" {
		return kind
	}
	form, v4s := embeddedIPv4(ip)
	for _, v4 := range v4s {
		if kind := ownKind(v4); kind != "" {
			return fmt.Sprintf("%s (%s in its %s form)", kind, v4, form)
		}
	}
	return ""
}

// ownKind classifies ip by its own prefix, not by what it embeds: the kind
// of its longest match in special, or "" for a globally reachable address.
func ownKind(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid"
	}
	ip = ip.WithZone("") // Prefix.Contains never matches a zoned address
	kind, bits := "", -1
	for _, e := range special {
		if e.prefix.Bits() > bits && e.prefix.Contains(ip) {
			kind, bits = e.kind, e.prefix.Bits()
		}
	}
	return kind
}

// embeddedIPv4 returns the IPv4 addresses an IPv6 address carries and the
// name of its form: the last 32 bits of a NAT64 (well-known prefix),
// IPv4-compatible or IPv4-translated address, bits 16-47 of a 6to4 one,
// and both the server's address and the client's (inverted) of a Teredo
// one, either of which its packets may be sent to.
func embeddedIPv4(ip netip.Addr) (form string, v4s []netip.Addr) {
	if !ip.Is6() {
		return "", nil
	}
	ip = ip.WithZone("") // Prefix.Contains never matches a zoned address
	b := ip.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case nat64.Contains(ip):
		return "NAT64", []netip.Addr{last}
	case v4Compatible.Contains(ip):
		return "IPv4-compatible", []netip.Addr{last}
	case v4Translated.Contains(ip):
		return "IPv4-translated", []netip.Addr{last}
	case sixToFour.Contains(ip):
		return "6to4", []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case teredo.Contains(ip):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return "Teredo", []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
	}
	return "", nil
}

// redact drops the query and fragment of u from what errors and logs show:
// they may hold tokens.
func redact(u *url.URL) string {
	c := *u
	c.RawQuery, c.Fragment, c.RawFragment, c.User = "", "", "", nil
	return c.String()
}
