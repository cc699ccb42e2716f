// Package guests holds what runs inside fumehood's sandboxes and how it is
// built; it has no code of its own.
//
//   - guests/cpython: the bundled Python guest, CPython 3.13 built for WASI
//     preview 1 from pinned sources (its recipe, the C driver and KDF module
//     linked into it, and the Python code that runs inside it).
//   - guests/testguest: a small Go program built with GOOS=wasip1 by the
//     tests, to exercise what a sandbox offers any WASI guest.
//
// Loading a built guest into a sandbox is package sandbox's
// (sandbox.CompilePython); the host's side of the driver is internal.
package guests
