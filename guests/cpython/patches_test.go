package cpython_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// sumProgram checks sum() against a model of CPython's sum on a 64-bit
// build (bltinmodule.c's fast paths, with a C integer of 64 bits), written
// in Python: the guest's sum must give what a 64-bit CPython gives, value
// and type, including where the int sum leaves 64 bits and where ints come
// into a float sum (whose compensation restarts when an int leaves the
// fast path). The edits of patches.go widen those paths on wasm32; before
// them the float cases below came out differently.
const sumProgram = `
import math, random

LO, HI = -2**63, 2**63

def ref_sum(it, start=0):
    it = iter(it)
    result = start
    if type(result) is int and LO <= result < HI:
        i = result
        result = None
        while result is None:
            try:
                item = next(it)
            except StopIteration:
                return i
            if type(item) in (int, bool) and LO <= item < HI and LO <= i + item < HI:
                i += int(item)
                continue
            result = i + item
    if type(result) is float:
        f, c = result, 0.0
        result = None
        while result is None:
            try:
                item = next(it)
            except StopIteration:
                if c and math.isfinite(c):
                    f += c
                return f
            if type(item) is float:
                t = f + item
                if abs(f) >= abs(item):
                    c += (f - t) + item
                else:
                    c += (item - t) + f
                f = t
                continue
            if isinstance(item, int) and LO <= item < HI:
                f += float(item)
                continue
            if c and math.isfinite(c):
                f += c
            result = f + item
    for item in it:
        result = result + item
    return result

cases = [
    (range(10**6),), (range(-10**6, 10),), (range(2**31 - 5, 2**31 + 5),),
    ([2**31 - 1, 1],), ([-2**31, -1],), ([2**63 - 1],), ([2**63 - 1, 1],), ([2**63 - 1, 1, -1],),
    ([-2**63, -1],), ([-2**63, -1, 1],), ([2**62, 2**62, -2**62],), ([2**64, -2**64, 5],),
    ([True, True, False, 3],), ([2**40, True, 1.5],), ([1, 2], 2**63), ([1, 2], 2**63 - 3),
    ([1, -2], -2**63 + 1), ([], 2**70), ([], -2**63), ([7], True),
    ([0.1, 2**40, 0.2, 0.3],), ([1e16, 2**40, 1.0, -1e16],), ([0.1] * 10 + [2**33] + [0.1] * 10,),
    ([0.1] * 10 + [2**63] + [0.1] * 10,), ([0.5, -2**63, 0.25, 2**62],), ([1.0, 2**53 + 1, 1.0],),
    ([1.5, True, 2**31, 1e-20],), ([0.1, 2**31], 0.0), ([float("inf"), 2**40, 1.0],),
    ([2**31, 0.5, 2**32, 1j],), ([10**30, 1.0],), ([1, 2**70, -2**70, 3],),
]
rnd = random.Random(36)
for _ in range(300):
    n = rnd.randrange(1, 40)
    items = []
    for _ in range(n):
        k = rnd.randrange(6)
        if k == 0:
            items.append(rnd.randrange(-2**64, 2**64))
        elif k == 1:
            items.append(rnd.randrange(-2**32, 2**32))
        elif k == 2:
            items.append(rnd.choice([2**31 - 1, 2**31, -2**31, 2**63 - 1, -2**63, 2**63, True]))
        elif k == 3:
            items.append(rnd.uniform(-1e10, 1e10))
        else:
            items.append(rnd.randrange(-1000, 1000))
    cases.append((items,) if k % 2 else (items, rnd.choice([0, 2**62, -2**63, 0.5, 2**63])))

bad = []
for case in cases:
    got, want = sum(*case), ref_sum(*case)
    if type(got) is not type(want) or repr(got) != repr(want):
        bad.append((case, got, want))
print(len(cases), len(bad))
for b in bad[:5]:
    print(b)
`

// TestSumAsOn64Bit: sum() gives what CPython on a 64-bit machine gives,
// through the fast paths the build widens (patches.go, cpythonEdits).
func TestSumAsOn64Bit(t *testing.T) {
	res, err := sandboxtest.Python(t).Run(context.Background(), sumProgram,
		&sandbox.RunOptions{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel}})
	require.NotNil(t, res)
	require.NoError(t, err, "%s", res.Stderr)
	assert.Equal(t, "332 0\n", string(res.Stdout))
}
