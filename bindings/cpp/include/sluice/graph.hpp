// Graph capture and replay: reserved.
//
// The C API's graph functions (sluice_graph_*) are not part of sluice.h yet. When
// they land, this header gets:
//   - sluice::Graph / sluice::GraphExec (owning, move-only, detail::UniqueHandle)
//     over the capture-end / instantiate / launch / update / destroy functions;
//   - a sluice::Capture RAII scope (begin capture on construction, end() returns
//     the Graph; the destructor aborts an unfinished capture);
//   - the graph cache keyed by a caller key.
// Every operation will follow the same std::nothrow / Result<T> scheme as the rest.
// Note: a C++ host callback (Stream::host_callback) runs its callable once and
// frees it, so it must not be captured into a graph until the C API can tell the
// bindings when a captured callback's user_data may be freed.
#ifndef SLUICE_CPP_GRAPH_HPP
#define SLUICE_CPP_GRAPH_HPP

#include "sluice/config.hpp"

#endif  // SLUICE_CPP_GRAPH_HPP
