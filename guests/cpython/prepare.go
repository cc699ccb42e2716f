package cpython

import (
	"context"
	"strings"

	"github.com/fumehood/fumehood/internal/emeh"
	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// Steps are the preparation steps applied to the built interpreter, in
// order, before anything runs it. Their names and versions are part of the
// cache key.
var Steps = []pipeline.Step{
	{Name: "strip-debug", Version: 1, Apply: stripDebug},
	{Name: "emeh", Version: 1, Apply: prepareInvokes},
	{Name: "errno", Version: 1, Apply: shimErrno},
	{Name: "fuel", Version: 4, Apply: meterFuel},
}

// prepareInvokes exports what the host's invoke functions call, for C++
// compiled with Emscripten-style exceptions (a variant's pybind11 code);
// it leaves a module without them as it is.
func prepareInvokes(_ context.Context, in []byte) ([]byte, error) { return emeh.Prepare(in) }

// shimErrno lets the host pass the guest errnos that wazero cannot express,
// such as ENOSPC for a full quota, which wazero would turn into EIO.
func shimErrno(_ context.Context, in []byte) ([]byte, error) { return errnoshim.Shim(in) }

// meterFuel instruments the guest with fuel metering, which is both its CPU
// budget and how a deadline stops it.
func meterFuel(_ context.Context, in []byte) ([]byte, error) { return fuel.Instrument(in) }

// stripDebug removes the .debug* custom sections. With them wazero's file
// compilation cache loads the guest in seconds instead of a fraction of one,
// and a cold compile takes twice as long.
func stripDebug(_ context.Context, in []byte) ([]byte, error) {
	m, err := wasmbin.Parse(in)
	if err != nil {
		return nil, err
	}
	m.RemoveCustom(func(name string) bool { return strings.HasPrefix(name, ".debug") })
	return m.Encode(), nil
}

func stepIDs(steps []pipeline.Step) []string {
	ids := make([]string, len(steps))
	for i, s := range steps {
		ids[i] = s.ID()
	}
	return ids
}
