// Package natstest runs real NATS servers with JetStream inside a test
// process, on loopback ports, for the tests of package natsstore and its
// users: no nats-server needs to be installed.
package natstest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is one running server.
type Server struct {
	*server.Server
	opts *server.Options
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port) }

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Restart starts a stopped server again, on its port and store.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	*s = *start(t, s.opts)
}

// Run starts a single JetStream server with its store in t.TempDir; it
// stops when t ends.
func Run(t testing.TB) *Server {
	t.Helper()
	return start(t, options(t, "single"))
}

// Cluster starts a JetStream cluster of n servers, each routed to all
// the others; they stop when t ends. URLs is their client URLs, comma-
// separated.
func Cluster(t testing.TB, n int) []*Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var out []*Server
	for i := range n {
		o := options(t, fmt.Sprintf("node-%d", i))
		o.Cluster = server.ClusterOpts{Name: "fumehood-test", Host: "127.0.0.1", Port: ports[i]}
		for j, p := range ports {
			if j != i {
				o.Routes = append(o.Routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		out = append(out, start(t, o))
	}
	return out
}

// URLs is the servers' client URLs, comma-separated.
func URLs(servers []*Server) string {
	var u []string
	for _, s := range servers {
		u = append(u, s.URL())
	}
	return strings.Join(u, ",")
}

func options(t testing.TB, name string) *server.Options {
	return &server.Options{ServerName: name, Host: "127.0.0.1", Port: freePort(t), JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
}

// freePort is a loopback port that was free a moment ago: a server
// restarts on the same one, and cluster routes are known before start.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func start(t testing.TB, o *server.Options) *Server {
	t.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: server %s not ready", o.ServerName)
	}
	srv := &Server{Server: s, opts: o}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return srv
}
