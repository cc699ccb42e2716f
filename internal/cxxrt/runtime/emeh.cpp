// The guest's half of C++ exceptions the Emscripten way on wasm32-wasi.
//
// clang's -mllvm -enable-emscripten-cxx-exceptions turns every call that
// may throw, in a function with something to do when it does (a
// destructor to run, a catch), into a call of an imported invoke_<sig>
// function with the callee's table index as first argument, and checks
// __THREW__ after it: when set, the code of its landing pad runs, which
// asks __cxa_find_matching_catch_<N> which of its catch clauses (if any)
// takes the exception in flight.
//
// The host (fumehood's sandbox) implements each invoke_<sig> by calling
// the callee in a nested call of the module, and fumehood_unwind by
// ending that nested call: the frames between the throw and the innermost
// invoke are dropped, the invoke returns, and the code after it finds
// __THREW__ set. Everything else, the exception objects, their reference
// counts, begin and end of catch, rethrow and std::exception_ptr, is
// libc++abi's own (cxa_exception.cpp), which calls _Unwind_RaiseException
// here instead of libunwind's.
#include <stdint.h>

#include "cxa_exception.h"
#include "private_typeinfo.h"

using namespace __cxxabiv1;

extern "C" {

// Set to 1 by a throw; the code clang puts after each invoke reads it and
// sets it back to 0. (__threwValue is setjmp's, which nothing here uses.)
uintptr_t __THREW__ = 0;
int __threwValue = 0;

// fumehood_unwind ends the host's innermost invoke. It returns only when
// no invoke is active: then no landing pad can run, nothing catches.
__attribute__((import_module("env"), import_name("fumehood_unwind"))) void fumehood_unwind(void);

// The exception being thrown, from its throw to the landing pad that
// catches it.
static _Unwind_Exception* in_flight;

// The second result of __cxa_find_matching_catch_<N>: the selector, the
// type_info of the catch clause that matched.
static int temp_ret;

int getTempRet0(void) { return temp_ret; }
void setTempRet0(int v) { temp_ret = v; }

// A catch clause's selector is its type_info's address.
int llvm_eh_typeid_for(void* type) { return (int)(uintptr_t)type; }

// _Unwind_RaiseException returns only when nothing can catch e, and
// __cxa_throw then calls std::terminate, as native code does.
_Unwind_Reason_Code _Unwind_RaiseException(_Unwind_Exception* e) {
  in_flight = e;
  __THREW__ = 1;
  fumehood_unwind();
  __THREW__ = 0;
  in_flight = nullptr;
  return _URC_END_OF_STACK;
}

_Unwind_Reason_Code _Unwind_Resume_or_Rethrow(_Unwind_Exception* e) { return _Unwind_RaiseException(e); }

// A landing pad without a matching catch (destructors only) goes on
// unwinding with the exception it was given; when nothing is left to
// catch it, the exception is uncaught.
void __resumeException(void* e) {
  _Unwind_RaiseException(static_cast<_Unwind_Exception*>(e));
  __cxa_begin_catch(e);
  std::terminate();
}

void _Unwind_Resume(_Unwind_Exception* e) { __resumeException(e); }

void _Unwind_DeleteException(_Unwind_Exception* e) {
  if (e->exception_cleanup != nullptr) e->exception_cleanup(_URC_FOREIGN_EXCEPTION_CAUGHT, e);
}

// find_matching_catch returns the exception in flight, for the landing
// pad's __cxa_begin_catch, and sets the selector to the first of the
// clauses that catches it (a null type is catch (...)), or to 0 when none
// does. Like libc++abi's personality routine, it records the pointer the
// handler receives (adjusted to a base class, or dereferenced for a
// pointer) in the exception's header.
static void* find_matching_catch(void* const* types, int n) {
  _Unwind_Exception* e = in_flight;
  temp_ret = 0;
  if (e == nullptr) return nullptr;
  __cxa_exception* header = reinterpret_cast<__cxa_exception*>(e + 1) - 1;
  void* thrown = e + 1;
  uint64_t cls = __getExceptionClass(e);
  bool native = __isOurExceptionClass(e);
  if (cls == kOurDependentExceptionClass)
    thrown = (reinterpret_cast<__cxa_dependent_exception*>(thrown) - 1)->primaryException;
  for (int i = 0; i < n; i++) {
    const __shim_type_info* catch_type = static_cast<const __shim_type_info*>(types[i]);
    if (catch_type == nullptr) {  // catch (...)
      if (native) header->adjustedPtr = thrown;
      return e;
    }
    if (!native) continue;  // only catch (...) takes a foreign exception
    void* adjusted = thrown;
    const __shim_type_info* thrown_type = static_cast<const __shim_type_info*>(header->exceptionType);
    if (catch_type->can_catch(thrown_type, adjusted)) {
      header->adjustedPtr = adjusted;
      temp_ret = llvm_eh_typeid_for(const_cast<__shim_type_info*>(catch_type));
      return e;
    }
  }
  return e;
}

// clang names each landing pad's query by its number of clauses plus
// two: one function for each number of clauses up to 32 (pybind11's
// exception translator has 12).
void* __cxa_find_matching_catch_2(void) { return find_matching_catch(nullptr, 0); }
#define P(i) void* t##i
#define A(i) t##i
#define PL1 P(1)
#define AL1 A(1)
#define PL2 PL1, P(2)
#define AL2 AL1, A(2)
#define PL3 PL2, P(3)
#define AL3 AL2, A(3)
#define PL4 PL3, P(4)
#define AL4 AL3, A(4)
#define PL5 PL4, P(5)
#define AL5 AL4, A(5)
#define PL6 PL5, P(6)
#define AL6 AL5, A(6)
#define PL7 PL6, P(7)
#define AL7 AL6, A(7)
#define PL8 PL7, P(8)
#define AL8 AL7, A(8)
#define PL9 PL8, P(9)
#define AL9 AL8, A(9)
#define PL10 PL9, P(10)
#define AL10 AL9, A(10)
#define PL11 PL10, P(11)
#define AL11 AL10, A(11)
#define PL12 PL11, P(12)
#define AL12 AL11, A(12)
#define PL13 PL12, P(13)
#define AL13 AL12, A(13)
#define PL14 PL13, P(14)
#define AL14 AL13, A(14)
#define PL15 PL14, P(15)
#define AL15 AL14, A(15)
#define PL16 PL15, P(16)
#define AL16 AL15, A(16)
#define PL17 PL16, P(17)
#define AL17 AL16, A(17)
#define PL18 PL17, P(18)
#define AL18 AL17, A(18)
#define PL19 PL18, P(19)
#define AL19 AL18, A(19)
#define PL20 PL19, P(20)
#define AL20 AL19, A(20)
#define PL21 PL20, P(21)
#define AL21 AL20, A(21)
#define PL22 PL21, P(22)
#define AL22 AL21, A(22)
#define PL23 PL22, P(23)
#define AL23 AL22, A(23)
#define PL24 PL23, P(24)
#define AL24 AL23, A(24)
#define PL25 PL24, P(25)
#define AL25 AL24, A(25)
#define PL26 PL25, P(26)
#define AL26 AL25, A(26)
#define PL27 PL26, P(27)
#define AL27 AL26, A(27)
#define PL28 PL27, P(28)
#define AL28 AL27, A(28)
#define PL29 PL28, P(29)
#define AL29 AL28, A(29)
#define PL30 PL29, P(30)
#define AL30 AL29, A(30)
#define PL31 PL30, P(31)
#define AL31 AL30, A(31)
#define PL32 PL31, P(32)
#define AL32 AL31, A(32)
#define FIND(N, K)                               \
  void* __cxa_find_matching_catch_##N(PL##K) {   \
    void* t[] = {AL##K};                         \
    return find_matching_catch(t, K);            \
  }
FIND(3, 1)
FIND(4, 2)
FIND(5, 3)
FIND(6, 4)
FIND(7, 5)
FIND(8, 6)
FIND(9, 7)
FIND(10, 8)
FIND(11, 9)
FIND(12, 10)
FIND(13, 11)
FIND(14, 12)
FIND(15, 13)
FIND(16, 14)
FIND(17, 15)
FIND(18, 16)
FIND(19, 17)
FIND(20, 18)
FIND(21, 19)
FIND(22, 20)
FIND(23, 21)
FIND(24, 22)
FIND(25, 23)
FIND(26, 24)
FIND(27, 25)
FIND(28, 26)
FIND(29, 27)
FIND(30, 28)
FIND(31, 29)
FIND(32, 30)
FIND(33, 31)
FIND(34, 32)

}  // extern "C"
