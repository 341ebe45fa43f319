// Library-wide functions: version checks, the engine mode, live-handle counts.
#ifndef SLUICE_CPP_LIBRARY_HPP
#define SLUICE_CPP_LIBRARY_HPP

#include <cstdint>
#include <new>

#include "sluice/config.hpp"
#include "sluice/result.hpp"

namespace sluice {

/// The loaded library's version, "MAJOR.MINOR.PATCH" (static string).
inline const char* version() noexcept { return sluice_version(); }

/// The ABI version of the loaded library.
inline std::uint32_t abi_version() noexcept { return sluice_abi_version(); }

/// True when the loaded library implements the ABI these headers were built for.
inline bool abi_compatible() noexcept { return sluice_abi_version() == SLUICE_ABI_VERSION; }

/// Number of live handles of every type (for leak checks in tests).
inline std::uint64_t live_handles() noexcept { return sluice_live_handles(); }

/// The dependency engine's mode (`SLUICE_ENGINE_*`).
enum class EngineMode : std::uint32_t {
  async = SLUICE_ENGINE_ASYNC,  ///< ops only enqueue work (the default)
  sync = SLUICE_ENGINE_SYNC,    ///< the host synchronises after every tracked op
};

/// The process-wide engine mode (initially from SLUICE_ENGINE=async|sync).
inline EngineMode engine_mode() noexcept { return static_cast<EngineMode>(sluice_engine_mode()); }

/// Sets the process-wide engine mode.
inline Result<void> set_engine_mode(std::nothrow_t, EngineMode mode) {
  return detail::check(sluice_engine_set_mode(static_cast<std::uint32_t>(mode)));
}

#if SLUICE_CPP_EXCEPTIONS
inline void set_engine_mode(EngineMode mode) { set_engine_mode(std::nothrow, mode).value(); }
#endif

}  // namespace sluice

#endif  // SLUICE_CPP_LIBRARY_HPP
