package cpython

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sourceEdit is one change made to a source tree before it is built: in
// file, the text old, which must occur exactly n times, becomes new.
type sourceEdit struct {
	file, old, new string
	n              int
}

// applyEdits makes edits in the tree at dir. An edit whose text does not
// occur as often as it should (a new source) is an error, and the build
// stops rather than build something else.
func applyEdits(dir, what string, edits []sourceEdit) error {
	for _, e := range edits {
		p := filepath.Join(dir, e.file)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if got := strings.Count(string(data), e.old); got != e.n {
			return fmt.Errorf("%s source edit of %s: %q occurs %d times, want %d", what, e.file, e.old, got, e.n)
		}
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(data), e.old, e.new)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// secondParam gives each function of defs (its definition's head, as
// "name(Type *self)") the unused second parameter param, in file.
// Python calls a METH_NOARGS method and a getter with two arguments,
// (self, NULL); C code that declares such a function with one and casts
// it to PyCFunction or getter works on native ABIs, but on wasm32 the
// call is an indirect call of another type, which traps.
func secondParam(file, param string, defs ...string) []sourceEdit {
	var edits []sourceEdit
	for _, d := range defs {
		edits = append(edits, sourceEdit{file, d, strings.TrimSuffix(d, ")") + ", " + param + ")", 1})
	}
	return edits
}

// editFlags describes edits for Info.Flags (and so the cache key).
func editFlags(edits []sourceEdit) string {
	var out []string
	for _, e := range edits {
		out = append(out, e.file+": "+strconv.Quote(e.old)+" -> "+strconv.Quote(e.new))
	}
	return strings.Join(out, "; ")
}

// cpythonEdits are the changes made to CPython's source. wasm32 is ILP32:
// C's long and Py_ssize_t have 32 bits, where CPython's fast paths were
// written for the 64 of a 64-bit Unix. Each edit widens one such path to
// long long, so that it takes the range a 64-bit build takes; results are
// the same, a 64-bit CPython's (Python's int has no width; only which path
// computes it changes). bench/README.md measures each.
var cpythonEdits = []sourceEdit{
	// sum() of ints adds in a C integer until the sum leaves it, then in
	// Python ints, one object per item. With a 32-bit Py_ssize_t,
	// sum(range(10**7)) left it after 65,536 items. The float loop's
	// int items take the same path (a long of 32 bits sent every int past
	// 2^31 through float + int, which also restarts the compensated sum).
	{"Python/bltinmodule.c", "        Py_ssize_t i_result = PyLong_AsLongAndOverflow(result, &overflow);\n",
		"        long long i_result = PyLong_AsLongLongAndOverflow(result, &overflow);\n", 1},
	{"Python/bltinmodule.c", "PyLong_FromSsize_t(i_result)", "PyLong_FromLongLong(i_result)", 2},
	{"Python/bltinmodule.c", "                Py_ssize_t b;\n                overflow = 0;\n",
		"                long long b;\n                overflow = 0;\n", 1},
	{"Python/bltinmodule.c", "                    b = PyLong_AsLongAndOverflow(item, &overflow);\n",
		"                    b = PyLong_AsLongLongAndOverflow(item, &overflow);\n", 1},
	{"Python/bltinmodule.c", "(b <= PY_SSIZE_T_MAX - i_result)", "(b <= LLONG_MAX - i_result)", 1},
	{"Python/bltinmodule.c", "(b >= PY_SSIZE_T_MIN - i_result)", "(b >= LLONG_MIN - i_result)", 1},
	{"Python/bltinmodule.c", "                long value;\n                int overflow;\n                value = PyLong_AsLongAndOverflow(item, &overflow);\n",
		"                long long value;\n                int overflow;\n                value = PyLong_AsLongLongAndOverflow(item, &overflow);\n", 1},
}

// patchSource makes cpythonEdits in the extracted CPython tree.
func (b *builder) patchSource(context.Context) error {
	return applyEdits(b.path(pySrc), "CPython", cpythonEdits)
}
