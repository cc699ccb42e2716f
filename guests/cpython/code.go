package cpython

import "embed"

// Code is the code fumehood runs inside the guest, the files under
// guests/cpython/python:
//
//	driver/     the driver's Python side: how each request runs and how its
//	            outcome is written (run by the C driver, cdriver/fhdriver.c)
//	startup/    start-up code run before the code of every run, in every
//	            pre-initialized image (compat patches compiled on first use)
//	hostcall/   mounted at /dev/fumehood: the channel file "call", the
//	            fumehood module (lib/) for host calls and the network, and the
//	            sitecustomize (site/) that routes urllib through it
//
// The C driver and the KDF module (cdriver/, kdf/) are compiled into the
// interpreter by Build.
//
//go:embed all:python
var Code embed.FS
