package codetool

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// limitsText says the limits of each run and of an idle conversation, for
// a model.
func limitsText(l sandbox.Limits, idle time.Duration) string {
	var b strings.Builder
	b.WriteString("Limits of each run: ")
	if l.Timeout > 0 {
		fmt.Fprintf(&b, "%s of wall time (timeout_ms can only shorten it), ", l.Timeout)
	}
	if l.Fuel != sandbox.UnlimitedFuel {
		fmt.Fprintf(&b, "%s of CPU (WebAssembly instructions; print(1) costs about 2 million), ", count(l.Fuel))
	}
	fmt.Fprintf(&b, "%s of memory (past it MemoryError) and %s of each of stdout and stderr (past it output is cut).",
		size(l.Memory), size(int64(l.MaxOutput)))
	if idle > 0 {
		fmt.Fprintf(&b, " A conversation with no call for %s is closed and its state lost.", idle)
	}
	return b.String()
}

// count says n in words a model reads at a glance: "3 trillion".
func count(n int64) string {
	for _, u := range []struct {
		v    int64
		name string
	}{{1e12, "trillion"}, {1e9, "billion"}, {1e6, "million"}} {
		if n >= u.v {
			return strconv.FormatFloat(float64(n)/float64(u.v), 'g', 3, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// size says a byte count in the largest binary unit that divides it evenly
// (or MiB, rounded): "256 MiB".
func size(n int64) string {
	for _, u := range []struct {
		v    int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + " " + u.name
		}
	}
	if n >= 1<<20 {
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
