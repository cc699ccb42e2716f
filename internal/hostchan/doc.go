// Package hostchan is the channel through which guest code calls the host:
// the Go functions of a hostcall.Config, and HTTP requests the host makes
// under a network policy (package netpolicy).
//
// The stock guest has no imports of fumehood's own, so the channel is a
// file: a Server's FS (mounted by the sandbox at /dev/fumehood) holds the
// channel file "call", the Python package fumehood (in "lib") and, for
// sandboxes with a network policy, a sitecustomize that routes urllib and
// http.client through the host (in "site"). A guest writes a request frame
// to the channel and reads the response from it, in its own fd_write and
// fd_read calls:
//
//	frame = u32 header length | u32 body length | JSON header | body   (big-endian)
//
// A server holds one request and one response at a time: a write stops at
// the end of a frame, and a frame started while a response is unread (on
// any channel of the server) fails with EAGAIN. What it holds is reported
// by Usage and never exceeds MaxFrameBytes + MaxResponseFrameBytes.
//
// Each run binds the server with Begin, which gives every call a context
// bound to the run's deadline and counts calls and requests against the
// Config's limits. A handler's error, a refusal by the policy, a limit or a
// panic in a handler reaches the guest as an error response (in Python, a
// fumehood.CallError or fumehood.http.PolicyError), never as a crash of the
// host.
package hostchan
