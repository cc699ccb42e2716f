package netpolicy_test

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/fumehood/fumehood/netpolicy"
)

func ExamplePolicy_Check() {
	p := &netpolicy.Policy{Allow: []netpolicy.Rule{
		{Scheme: "https", Host: "api.example.com", Methods: []string{"GET"}},
	}}
	for _, raw := range []string{"https://api.example.com/v1", "https://evil.example/"} {
		u, _ := url.Parse(raw)
		err := p.Check("GET", u)
		var denied *netpolicy.DeniedError
		if errors.As(err, &denied) {
			fmt.Println(raw, "refused by", denied.Rule)
			continue
		}
		fmt.Println(raw, "allowed")
	}
	// Output:
	// https://api.example.com/v1 allowed
	// https://evil.example/ refused by allow-list
}
