/*
 * fumehood's driver, linked into the built CPython guest (guests/cpython,
 * build step "fumehood driver"). It gives the module entry points besides
 * _start, so that a host can start the interpreter once, keep the
 * instance's memory, and run requests on it without unwinding anything:
 *
 *   fumehood_alloc(n) -> ptr     malloc(n): a buffer the host writes into
 *   fumehood_free(ptr)           free(ptr)
 *   fumehood_init(src, n) -> rc  starts the interpreter (site included, as
 *                                `python -u -B`), then runs the n bytes of
 *                                Python source at src in __main__'s
 *                                namespace: the driver's Python side, which
 *                                must define fumehood_exec(request: bytes)
 *                                -> bytes. 0 on success; else an error is on
 *                                stderr and the instance is of no use.
 *   fumehood_exec(req, n) -> p   calls fumehood_exec with the n bytes at
 *                                req and returns the address of two u32
 *                                (little endian): the address and length
 *                                of the bytes it returned (the outcome),
 *                                valid until the next call. 0 when the
 *                                Python side failed (its error on stderr).
 *
 * _start is untouched: the module is still a WASI command. An instance
 * runs either _start or fumehood_init, never both (each runs the C
 * constructors; fumehood_init refuses a second call of its own). wasm-ld
 * wraps no export in constructor calls (it does so only for a command
 * whose code never calls __wasm_call_ctors, and wasi-libc's crt1-command
 * calls it), so fumehood_init calls it, once.
 *
 * Everything a guest's code can reach (the request, the outcome, the
 * Python side's namespace) is untrusted by the host, which reads the
 * outcome with bounds.
 */
#include "Python.h"

#include <stdint.h>
#include <stdlib.h>

extern void __wasm_call_ctors(void);

static int fh_state;      /* 0 new, 1 initialized, 2 failed */
static PyObject *fh_exec; /* the Python side's fumehood_exec */
static PyObject *fh_last; /* the last outcome, kept until the next call */
static uint32_t fh_result[2];

__attribute__((export_name("fumehood_alloc"))) void *
fumehood_alloc(uint32_t n)
{
    return malloc(n ? n : 1);
}

__attribute__((export_name("fumehood_free"))) void
fumehood_free(void *p)
{
    free(p);
}

static void
fh_flush(void)
{
    PyObject *exc = PyErr_GetRaisedException();
    const char *names[] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        PyObject *f = PySys_GetObject(names[i]); /* borrowed */
        if (f != NULL && f != Py_None) {
            PyObject *r = PyObject_CallMethod(f, "flush", NULL);
            if (r == NULL) {
                PyErr_Clear();
            }
            Py_XDECREF(r);
        }
    }
    PyErr_SetRaisedException(exc);
}

static void
fh_print_error(void)
{
    PyObject *exc = PyErr_GetRaisedException();
    if (exc != NULL) {
        /* Not PyErr_Print: it would exit on SystemExit. */
        PyErr_DisplayException(exc);
        Py_DECREF(exc);
    }
    fh_flush();
}

static int32_t
fh_fail(int32_t rc, const char *msg)
{
    fh_state = 2;
    if (msg != NULL) {
        fputs("fumehood driver: ", stderr);
        fputs(msg, stderr);
        fputc('\n', stderr);
    }
    return rc;
}

__attribute__((export_name("fumehood_init"))) int32_t
fumehood_init(const char *src, uint32_t n)
{
    if (fh_state != 0) {
        fputs("fumehood driver: fumehood_init called twice\n", stderr);
        return 1;
    }
    fh_state = 2;
    __wasm_call_ctors();

    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.buffered_stdio = 0; /* -u */
    config.write_bytecode = 0; /* -B */
    config.parse_argv = 0;
    PyStatus status = PyConfig_SetBytesArgv(&config, 1, (char *[]){"python", NULL});
    if (!PyStatus_Exception(status)) {
        status = Py_InitializeFromConfig(&config);
    }
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        fputs("fumehood driver: Python start-up failed: ", stderr);
        fputs(status.err_msg ? status.err_msg : "?", stderr);
        fputc('\n', stderr);
        return 2;
    }

    char *buf = malloc((size_t)n + 1);
    if (buf == NULL) {
        return fh_fail(3, "out of memory");
    }
    memcpy(buf, src, n);
    buf[n] = 0;
    PyObject *main = PyImport_AddModule("__main__"); /* borrowed */
    PyObject *ns = main ? PyModule_GetDict(main) : NULL;
    PyObject *r = ns ? PyRun_StringFlags(buf, Py_file_input, ns, ns, NULL) : NULL;
    free(buf);
    if (r == NULL) {
        fh_print_error();
        return fh_fail(4, "the driver's Python side failed");
    }
    Py_DECREF(r);
    PyObject *fn = PyDict_GetItemString(ns, "fumehood_exec"); /* borrowed */
    if (fn == NULL || !PyCallable_Check(fn)) {
        fh_flush();
        return fh_fail(5, "the driver's Python side defines no fumehood_exec");
    }
    fh_exec = Py_NewRef(fn);
    fh_flush();
    fh_state = 1;
    return 0;
}

__attribute__((export_name("fumehood_exec"))) uint32_t
fumehood_exec(const char *req, uint32_t n)
{
    if (fh_state != 1) {
        return 0;
    }
    Py_CLEAR(fh_last);
    fh_result[0] = fh_result[1] = 0;
    PyObject *arg = PyBytes_FromStringAndSize(req, n);
    if (arg == NULL) {
        fh_print_error();
        return 0;
    }
    PyObject *r = PyObject_CallOneArg(fh_exec, arg);
    Py_DECREF(arg);
    if (r == NULL) {
        fh_print_error();
        return 0;
    }
    if (!PyBytes_Check(r)) {
        Py_DECREF(r);
        fh_flush();
        fputs("fumehood driver: fumehood_exec returned no bytes\n", stderr);
        return 0;
    }
    fh_last = r;
    fh_result[0] = (uint32_t)(uintptr_t)PyBytes_AS_STRING(r);
    fh_result[1] = (uint32_t)PyBytes_GET_SIZE(r);
    return (uint32_t)(uintptr_t)fh_result;
}
