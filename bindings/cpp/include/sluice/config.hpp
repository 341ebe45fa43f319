// sluice C++ bindings: configuration macros shared by every header.
//
// SLUICE_CPP_EXCEPTIONS is 1 when the translation unit is compiled with C++
// exceptions (the default) and 0 under -fno-exceptions. Define it to 0 yourself to
// compile the throwing overloads out even when exceptions are on. With it at 0,
// only the std::nothrow overloads that return sluice::Result<T> exist, and
// Result<T>::value() on an error prints the message and aborts.
#ifndef SLUICE_CPP_CONFIG_HPP
#define SLUICE_CPP_CONFIG_HPP

#include <sluice.h>

#if __cplusplus < 201703L && (!defined(_MSVC_LANG) || _MSVC_LANG < 201703L)
#error "the sluice C++ bindings need C++17 or newer"
#endif

#ifndef SLUICE_CPP_EXCEPTIONS
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define SLUICE_CPP_EXCEPTIONS 1
#else
#define SLUICE_CPP_EXCEPTIONS 0
#endif
#endif

// The C++ bindings were written against this ABI.
#define SLUICE_CPP_ABI_VERSION 1

#if SLUICE_ABI_VERSION != SLUICE_CPP_ABI_VERSION
#error "sluice.h and the sluice C++ headers disagree on the ABI version"
#endif

#endif  // SLUICE_CPP_CONFIG_HPP
