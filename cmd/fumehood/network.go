package main

import (
	"flag"
	"log/slog"

	"github.com/fumehood/fumehood/netpolicy"
)

// networkFlags are run's --allow-host and --allow-private.
type networkFlags struct {
	rules   []netpolicy.Rule
	private bool
}

func (n *networkFlags) register(fs *flag.FlagSet) {
	fs.Func("allow-host", "allow HTTP(S) requests to HOST[:PORT] (any method; *.DOMAIN for every name below DOMAIN; repeatable)", func(v string) error {
		r, err := netpolicy.ParseHostRule(v)
		if err != nil {
			return err
		}
		n.rules = append(n.rules, r)
		return nil
	})
	fs.BoolVar(&n.private, "allow-private", false, "let allowed hosts resolve to loopback, link-local and private addresses")
}

// policy returns the network policy the flags describe, or nil (no network
// at all) when none was given.
func (n *networkFlags) policy() *netpolicy.Policy {
	if len(n.rules) == 0 && !n.private {
		return nil
	}
	return &netpolicy.Policy{Allow: n.rules, AllowPrivate: n.private}
}

// quietLogger drops the records of host calls and requests: the command's
// stderr is the guest's.
var quietLogger = slog.New(slog.DiscardHandler)
