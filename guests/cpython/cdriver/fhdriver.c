/*
 * fumehood's driver, linked into the built CPython guest (guests/cpython,
 * build step "fumehood driver"). It gives the module entry points besides
 * _start, so that a host can start the interpreter once, keep the
 * instance's memory, and run requests on it without unwinding anything:
 *
 *   fumehood_alloc(n) -> ptr     malloc(n): a buffer the host writes into
 *   fumehood_free(ptr)           free(ptr)
 *   fumehood_request(n) -> ptr   a buffer of at least n bytes the driver
 *                                keeps (in memory, so in every image and
 *                                checkpoint), for the host to write a
 *                                request into: valid until the next call,
 *                                which may move it; 0 when out of memory.
 *                                A host calls it only when a request
 *                                outgrows the last buffer.
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
 *   fumehood_timer() -> p        the address of the alarm: two i64 (little
 *                                endian), when SIGALRM is due on the run's
 *                                monotonic clock in ns (0: never) and the
 *                                interval that re-arms it (0: none). The
 *                                start-up code's signal.alarm and
 *                                setitimer write them, through the
 *                                memoryview _fumehood_timer that
 *                                fumehood_init puts in the namespace; the
 *                                host reads them at its fuel checks and
 *                                sleeps. fumehood_exec clears them: an
 *                                alarm ends with its run.
 *   fumehood_signal(sig) -> rc   what the kernel does when signal sig
 *                                arrives: the Python handler runs at the
 *                                interpreter's next check (the signal is
 *                                tripped, as PyErr_SetInterruptEx does; it
 *                                is async-signal-safe, so the host may call
 *                                it from any fuel check), an ignored
 *                                signal does nothing, and one left to its
 *                                default action ends the program with
 *                                status 128+sig. -1 for a bad number.
 *
 * _start is untouched: the module is still a WASI command. An instance
 * runs either _start or fumehood_init, never both (each runs the C
 * constructors; fumehood_init refuses a second call of its own). wasm-ld
 * wraps no export in constructor calls (it does so only for a command
 * whose code never calls __wasm_call_ctors, and wasi-libc's crt1-command
 * calls it), so fumehood_init calls it, once.
 *
 * Before the Python side runs, fumehood_init puts _fumehood_compile in its
 * namespace (see fh_compile): a run's code compiled straight from source,
 * split at its last statement when that is an expression, which the
 * Python side would otherwise get by a round trip through the ast
 * module's objects (ast.parse, then compile of the tree: 0.42 million
 * instructions for `x += 1`, against 0.23 million for this). It needs
 * the parser's and compiler's internal entry points, so the driver is
 * compiled as part of the core (Py_BUILD_CORE); it is linked into the
 * interpreter, not loaded as an extension.
 *
 * Everything a guest's code can reach (the request, the outcome, the
 * Python side's namespace) is untrusted by the host, which reads the
 * outcome with bounds.
 */
#define Py_BUILD_CORE 1
#include "Python.h"
#include "pycore_ast.h"      /* mod_ty, _PyAST_Expression */
#include "pycore_compile.h"  /* _PyAST_Compile */
#include "pycore_parser.h"   /* _PyParser_ASTFromString */
#include "pycore_pyarena.h"  /* _PyArena_New, _PyArena_Free */
#include "pycore_runtime.h"  /* _PyRuntime.signals */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern void __wasm_call_ctors(void);

static int fh_state;      /* 0 new, 1 initialized, 2 failed */
static PyObject *fh_exec; /* the Python side's fumehood_exec */
static PyObject *fh_last; /* the last outcome, kept until the next call */
static uint32_t fh_result[2];
static int64_t fh_timer[2]; /* see fumehood_timer */

__attribute__((export_name("fumehood_timer"))) uint32_t
fumehood_timer(void)
{
    return (uint32_t)(uintptr_t)fh_timer;
}

__attribute__((export_name("fumehood_signal"))) int32_t
fumehood_signal(int32_t signum)
{
    if (signum < 1 || signum >= Py_NSIG) {
        return -1;
    }
    /* The handler as the signal module holds it: SIG_DFL is the int 0. */
    PyObject *func = (PyObject *)_Py_atomic_load_ptr(&_PyRuntime.signals.handlers[signum].func);
    if (func != NULL && PyLong_CheckExact(func) && PyLong_AsLong(func) == 0) {
        fputs("fumehood: the program received signal ", stderr);
        fprintf(stderr, "%d, whose default action ends it\n", (int)signum);
        fflush(stderr);
        _Exit(128 + signum);
    }
    return PyErr_SetInterruptEx(signum);
}

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

/*
 * _fumehood_compile(source: str, filename: str) -> (code, code | None)
 *
 * What compile(source, filename, 'exec') does (the same flags, errors and
 * warnings: builtins.compile of a str, no inherited future flags), except
 * that a last statement that is an expression is left out of the first
 * code object and compiled apart, in 'eval' mode, as the second; None
 * when there is no such statement.
 */
static PyObject *
fh_compile(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_fumehood_compile(source: str, filename: str)");
        return NULL;
    }
    PyObject *filename = args[1];
    Py_ssize_t size;
    const char *str = PyUnicode_AsUTF8AndSize(args[0], &size);
    if (str == NULL) {
        return NULL;
    }
    if (strlen(str) != (size_t)size) {
        PyErr_SetString(PyExc_SyntaxError, "source code string cannot contain null bytes");
        return NULL;
    }
    PyCompilerFlags cf = _PyCompilerFlags_INIT;
    cf.cf_flags = PyCF_SOURCE_IS_UTF8 | PyCF_IGNORE_COOKIE;
    PyArena *arena = _PyArena_New();
    if (arena == NULL) {
        return NULL;
    }
    PyObject *body = NULL, *last = NULL, *res = NULL;
    mod_ty mod = _PyParser_ASTFromString(str, filename, Py_file_input, &cf, arena);
    if (mod == NULL) {
        goto done;
    }
    mod_ty expr = NULL;
    asdl_stmt_seq *stmts = mod->v.Module.body;
    Py_ssize_t n = asdl_seq_LEN(stmts);
    if (n > 0) {
        stmt_ty tail = asdl_seq_GET(stmts, n - 1);
        if (tail->kind == Expr_kind) {
            expr = _PyAST_Expression(tail->v.Expr.value, arena);
            if (expr == NULL) {
                goto done;
            }
            stmts->size = n - 1;
        }
    }
    body = (PyObject *)_PyAST_Compile(mod, filename, &cf, -1, arena);
    if (body == NULL) {
        goto done;
    }
    if (expr != NULL) {
        /* Flags of its own: _PyAST_Compile wrote the module's future
         * imports into cf, and compile() of the expression alone would
         * not see them. */
        PyCompilerFlags ecf = _PyCompilerFlags_INIT;
        ecf.cf_flags = PyCF_SOURCE_IS_UTF8 | PyCF_IGNORE_COOKIE;
        last = (PyObject *)_PyAST_Compile(expr, filename, &ecf, -1, arena);
        if (last == NULL) {
            goto done;
        }
    }
    res = PyTuple_Pack(2, body, last != NULL ? last : Py_None);
done:
    Py_XDECREF(body);
    Py_XDECREF(last);
    _PyArena_Free(arena);
    return res;
}

static PyMethodDef fh_compile_def = {
    "_fumehood_compile", _PyCFunction_CAST(fh_compile), METH_FASTCALL, NULL,
};

static char *fh_req;         /* fumehood_request's buffer */
static uint32_t fh_req_cap;

__attribute__((export_name("fumehood_request"))) void *
fumehood_request(uint32_t n)
{
    if (n > fh_req_cap || fh_req == NULL) {
        uint32_t cap = n < 4096 ? 4096 : n;
        char *p = realloc(fh_req, cap);
        if (p == NULL) {
            return NULL;
        }
        fh_req = p;
        fh_req_cap = cap;
    }
    return fh_req;
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
    PyObject *cc = ns ? PyCFunction_New(&fh_compile_def, NULL) : NULL;
    int ok = cc != NULL && PyDict_SetItemString(ns, fh_compile_def.ml_name, cc) == 0;
    Py_XDECREF(cc);
    PyObject *timer = ok ? PyMemoryView_FromMemory((char *)fh_timer, sizeof fh_timer, PyBUF_WRITE) : NULL;
    ok = timer != NULL && PyDict_SetItemString(ns, "_fumehood_timer", timer) == 0;
    Py_XDECREF(timer);
    PyObject *r = ok ? PyRun_StringFlags(buf, Py_file_input, ns, ns, NULL) : NULL;
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
    fh_timer[0] = fh_timer[1] = 0;
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
