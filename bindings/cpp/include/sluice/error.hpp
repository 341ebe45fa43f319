// sluice::Error: the C++ form of sluice_error_t.
#ifndef SLUICE_CPP_ERROR_HPP
#define SLUICE_CPP_ERROR_HPP

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "sluice/config.hpp"

namespace sluice {

/// The stable error codes of the C ABI (`SLUICE_ERROR_*`). Never renumbered.
enum class ErrorCode : std::uint32_t {
  ok = 0,
  panic = SLUICE_ERROR_PANIC,
  null_argument = SLUICE_ERROR_NULL_ARGUMENT,
  invalid_argument = SLUICE_ERROR_INVALID_ARGUMENT,
  invalid_handle = SLUICE_ERROR_INVALID_HANDLE,
  out_of_range = SLUICE_ERROR_OUT_OF_RANGE,
  unsupported = SLUICE_ERROR_UNSUPPORTED,
  no_driver = SLUICE_ERROR_NO_DRIVER,
  no_device = SLUICE_ERROR_NO_DEVICE,
  driver = SLUICE_ERROR_DRIVER,
  out_of_memory = SLUICE_ERROR_OUT_OF_MEMORY,
  capture_unsupported = SLUICE_ERROR_CAPTURE_UNSUPPORTED,
  capture_failed = SLUICE_ERROR_CAPTURE_FAILED,
  device_fault = SLUICE_ERROR_DEVICE_FAULT,
  callback_failed = SLUICE_ERROR_CALLBACK_FAILED,
  module_load = SLUICE_ERROR_MODULE_LOAD,
  not_found = SLUICE_ERROR_NOT_FOUND,
  wrong_device = SLUICE_ERROR_WRONG_DEVICE,
  invalid_state = SLUICE_ERROR_INVALID_STATE,
  end_of_data = SLUICE_ERROR_END_OF_DATA,  ///< a prefetcher's input ended (next() maps it to nullopt)
  timeout = SLUICE_ERROR_TIMEOUT,          ///< a blocking call gave up after its timeout
  corrupt_data = SLUICE_ERROR_CORRUPT_DATA,  ///< serialized data failed its checks
  compile = SLUICE_ERROR_COMPILE,            ///< compiling kernel source failed (the log is in the message)
};

/// The constant name of a code, e.g. "SLUICE_ERROR_INVALID_HANDLE" (static string).
inline const char* code_name(ErrorCode code) noexcept {
  return sluice_error_code_name(static_cast<std::uint32_t>(code));
}

/// An error reported by sluice: a stable code, the driver's CUresult where the
/// driver failed (0 otherwise), and a message naming the operation and the handle.
/// It is what the throwing API throws and what a failed sluice::Result<T> holds.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::uint32_t driver_code, const std::string& message)
      : std::runtime_error(message), code_(code), driver_code_(driver_code) {}

  /// Converts a C error and frees it. `err` must not be NULL.
  static Error adopt(sluice_error_t* err) {
    struct Free {
      void operator()(sluice_error_t* e) const noexcept { sluice_error_free(e); }
    };
    std::unique_ptr<sluice_error_t, Free> owned(err);  // freed even if the copy throws
    return Error(static_cast<ErrorCode>(sluice_error_code(err)), sluice_error_driver_code(err),
                 sluice_error_message(err));
  }

  /// The stable code (`SLUICE_ERROR_*`).
  ErrorCode code() const noexcept { return code_; }
  /// The code as the C ABI's integer.
  std::uint32_t raw_code() const noexcept { return static_cast<std::uint32_t>(code_); }
  /// The driver's CUresult behind the error, or 0.
  std::uint32_t driver_code() const noexcept { return driver_code_; }
  /// The message; the same string as what().
  const char* message() const noexcept { return what(); }
  /// The code's constant name, e.g. "SLUICE_ERROR_OUT_OF_RANGE".
  const char* code_name() const noexcept { return sluice::code_name(code_); }

 private:
  ErrorCode code_;
  std::uint32_t driver_code_;
};

}  // namespace sluice

#endif  // SLUICE_CPP_ERROR_HPP
