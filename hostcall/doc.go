// Package hostcall defines the Go functions a sandbox lets its guest code
// call: a Config maps names to Handlers (Func adapts a typed function) and
// bounds the calls of one run.
//
// Give a Config to sandbox.Config.HostCalls. Guest code reaches the
// functions through the Python package fumehood the sandbox mounts:
//
//	import fumehood
//	total = fumehood.call("add", a=40, b=2)
//
// A handler's error, a limit or a panic in a handler reaches the guest as an
// error (in Python, a fumehood.CallError whose kind names it), never as a
// crash of the host. A call's context is bound to the run's deadline.
package hostcall
