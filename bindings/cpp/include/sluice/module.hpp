// sluice::Module, sluice::Function and sluice::launch (CUDA only; the host
// backend reports ErrorCode::unsupported).
//
//   auto mod = sluice::Module::load(dev, ptx_text);
//   auto mod = sluice::Module::compile(dev, cuda_c_source, "scale.cu", {"-DN=4"});
//   auto fn = mod.function("scale");
//   sluice::launch(stream, fn, sluice::LaunchDims::linear(n, 256),
//                  /*reads=*/{x_sync}, /*writes=*/{y_sync}, x_ptr, y_ptr, n);
#ifndef SLUICE_CPP_MODULE_HPP
#define SLUICE_CPP_MODULE_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <string>
#include <vector>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/device.hpp"
#include "sluice/result.hpp"
#include "sluice/span.hpp"
#include "sluice/stream.hpp"
#include "sluice/sync.hpp"

namespace sluice {

/// Launch geometry.
struct LaunchDims {
  std::uint32_t grid[3] = {1, 1, 1};
  std::uint32_t block[3] = {1, 1, 1};
  std::uint32_t shared_mem_bytes = 0;

  /// A 1-D launch covering `n` threads with `block_size` threads per block.
  static LaunchDims linear(std::uint64_t n, std::uint32_t block_size) noexcept {
    LaunchDims d;
    std::uint64_t blocks = block_size ? n / block_size + (n % block_size != 0) : 0;
    // Past 2^32-1 blocks the grid saturates, and the driver refuses it.
    d.grid[0] = blocks == 0 ? 1 : blocks > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(blocks);
    d.block[0] = block_size ? block_size : 1;
    return d;
  }

  sluice_launch_dims_t raw() const noexcept {
    sluice_launch_dims_t d{};
    for (int i = 0; i < 3; ++i) {
      d.grid[i] = grid[i];
      d.block[i] = block[i];
    }
    d.shared_mem_bytes = shared_mem_bytes;
    return d;
  }
};

/// A kernel of a module. Move-only; keeps its module loaded. Made by
/// Module::function(), or by adopt() from a C handle.
class Function
    : public detail::Owner<Function, sluice_function_t, sluice_function_destroy> {
 public:
  /// Programmatic dependent launch (compute capability 9.0+): later launches may
  /// start before the kernel ahead of them on their stream completes, and the
  /// kernel waits for it itself with `griddepcontrol.wait`
  /// (`cudaGridDependencySynchronize()`) before touching its data. See
  /// sluice_function_set_programmatic_launch.
  Result<void> set_programmatic_launch(std::nothrow_t, bool enabled) const {
    return detail::check(sluice_function_set_programmatic_launch(raw(), enabled));
  }
#if SLUICE_CPP_EXCEPTIONS
  void set_programmatic_launch(bool enabled) const {
    set_programmatic_launch(std::nothrow, enabled).value();
  }
#endif

  /// Lets later launches (from any thread, captured ones included) ask for up to
  /// `bytes` of dynamic shared memory per block; a launch asking for more than
  /// 48 KiB needs this first. More than the device allows with the kernel's static
  /// shared memory gives ErrorCode::invalid_argument. See
  /// sluice_function_set_max_dynamic_shared_memory.
  Result<void> set_max_dynamic_shared_memory(std::nothrow_t, std::uint32_t bytes) const {
    return detail::check(sluice_function_set_max_dynamic_shared_memory(raw(), bytes));
  }
#if SLUICE_CPP_EXCEPTIONS
  void set_max_dynamic_shared_memory(std::uint32_t bytes) const {
    set_max_dynamic_shared_memory(std::nothrow, bytes).value();
  }
#endif
  /// Lets later launches use a thread block cluster larger than the portable 8
  /// blocks (the kernel's __cluster_dims__), up to what the device supports; such
  /// a launch may fail on other devices. Below compute capability 9.0 enabling
  /// gives ErrorCode::unsupported. See
  /// sluice_function_set_non_portable_cluster_size_allowed.
  Result<void> set_non_portable_cluster_size_allowed(std::nothrow_t, bool allowed) const {
    return detail::check(sluice_function_set_non_portable_cluster_size_allowed(raw(), allowed));
  }
#if SLUICE_CPP_EXCEPTIONS
  void set_non_portable_cluster_size_allowed(bool allowed) const {
    set_non_portable_cluster_size_allowed(std::nothrow, allowed).value();
  }
#endif
};

/// A loaded module (PTX text, cubin or fatbin). Move-only; it unloads once this
/// handle and its functions are destroyed.
class Module : public detail::Owner<Module, sluice_module_t, sluice_module_unload> {
 public:
  /// Loads an image of `len` bytes. A failed JIT compile gives
  /// ErrorCode::module_load with the JIT log in the message. PTX text needs no
  /// terminating NUL (the library adds one where the last byte is not NUL); a cubin
  /// or fatbin is exactly its bytes. An empty image gives
  /// ErrorCode::invalid_argument. The image stays the caller's and is only read
  /// during the call; the returned Module owns the handle and unloads it once it
  /// and its functions are destroyed.
  static Result<Module> load(std::nothrow_t, DeviceRef device, const void* image,
                             std::size_t len) {
    sluice_module_t h{};
    if (sluice_error_t* e = sluice_module_load(device.raw(), image, len, &h)) {
      return Error::adopt(e);
    }
    return adopt(h);
  }

  static Result<Module> load(std::nothrow_t, DeviceRef device, ByteView image) {
    return load(std::nothrow, device, image.data(), image.size());
  }

  /// Loads the image held in a string, PTX text or the bytes of a cubin or fatbin:
  /// its size() bytes, without the string's terminator (which would lie one byte
  /// past a binary image; PTX gets its NUL from the library).
  static Result<Module> load(std::nothrow_t, DeviceRef device, const std::string& image) {
    return load(std::nothrow, device, image.data(), image.size());
  }

  /// Compiles CUDA C `source` with NVRTC and loads the result
  /// (sluice_module_compile). `name` names the program in the compile log (nullptr
  /// or "" gives "sluice_kernel.cu"); `options` go to NVRTC as they are. Without
  /// --gpu-architecture (or -arch) the target is the device's own. The source may
  /// `#include <sluice/rng.cuh>` with no include path; kernels looked up with
  /// function() need `extern "C"`. A compile error gives ErrorCode::compile with
  /// the compile log in the message; the host backend, or no NVRTC, gives
  /// ErrorCode::unsupported. SLUICE_KERNEL_CACHE=dir caches compiled images.
  static Result<Module> compile(std::nothrow_t, DeviceRef device, const char* source,
                                const char* name = nullptr,
                                const std::vector<std::string>& options = {}) {
    std::vector<const char*> opts;
    opts.reserve(options.size());
    for (const std::string& o : options) opts.push_back(o.c_str());
    sluice_module_t h{};
    if (sluice_error_t* e = sluice_module_compile(device.raw(), source, name,
                                                  opts.empty() ? nullptr : opts.data(),
                                                  opts.size(), &h)) {
      return Error::adopt(e);
    }
    return adopt(h);
  }

  static Result<Module> compile(std::nothrow_t, DeviceRef device, const std::string& source,
                                const std::string& name = std::string(),
                                const std::vector<std::string>& options = {}) {
    return compile(std::nothrow, device, source.c_str(), name.c_str(), options);
  }

  /// Looks up a kernel; a missing name gives ErrorCode::not_found. The returned
  /// Function owns a new handle, which keeps the module loaded until it is destroyed.
  Result<Function> function(std::nothrow_t, const char* name) const {
    sluice_function_t f{};
    if (sluice_error_t* e = sluice_module_get_function(raw(), name, &f)) return Error::adopt(e);
    return Function::adopt(f);
  }

#if SLUICE_CPP_EXCEPTIONS
  static Module load(DeviceRef device, const void* image, std::size_t len) {
    return load(std::nothrow, device, image, len).value();
  }
  static Module load(DeviceRef device, ByteView image) {
    return load(std::nothrow, device, image).value();
  }
  static Module load(DeviceRef device, const std::string& image) {
    return load(std::nothrow, device, image).value();
  }
  static Module compile(DeviceRef device, const char* source, const char* name = nullptr,
                        const std::vector<std::string>& options = {}) {
    return compile(std::nothrow, device, source, name, options).value();
  }
  static Module compile(DeviceRef device, const std::string& source,
                        const std::string& name = std::string(),
                        const std::vector<std::string>& options = {}) {
    return compile(std::nothrow, device, source, name, options).value();
  }
  Function function(const char* name) const { return function(std::nothrow, name).value(); }
#endif
};

/// Launches `fn` on `stream` as one tracked op over `reads` and `writes`. `args`
/// holds one pointer per kernel parameter, as for cuLaunchKernel.
inline Result<void> launch_raw(std::nothrow_t, StreamRef stream, const Function& fn,
                               const LaunchDims& dims, void** args, std::size_t num_args,
                               const SyncList& reads = {}, const SyncList& writes = {}) {
  sluice_launch_dims_t d = dims.raw();
  return detail::check(sluice_stream_launch(stream.raw(), fn.raw(), &d, args, num_args, reads.data(),
                                     reads.size(), writes.data(), writes.size()));
}

/// Launches `fn` with the kernel parameters `args...` (each passed by address, so
/// their types must match the kernel's parameters exactly).
template <class... Args>
Result<void> launch(std::nothrow_t, StreamRef stream, const Function& fn, const LaunchDims& dims,
                    const SyncList& reads, const SyncList& writes, const Args&... args) {
  std::array<void*, sizeof...(Args) == 0 ? 1 : sizeof...(Args)> ptrs = {
      {const_cast<void*>(static_cast<const void*>(&args))...}};
  return launch_raw(std::nothrow, stream, fn, dims, sizeof...(Args) ? ptrs.data() : nullptr,
                    sizeof...(Args), reads, writes);
}

#if SLUICE_CPP_EXCEPTIONS
inline void launch_raw(StreamRef stream, const Function& fn, const LaunchDims& dims, void** args,
                       std::size_t num_args, const SyncList& reads = {},
                       const SyncList& writes = {}) {
  launch_raw(std::nothrow, stream, fn, dims, args, num_args, reads, writes).value();
}
template <class... Args>
void launch(StreamRef stream, const Function& fn, const LaunchDims& dims, const SyncList& reads,
            const SyncList& writes, const Args&... args) {
  launch(std::nothrow, stream, fn, dims, reads, writes, args...).value();
}
#endif

}  // namespace sluice

#endif  // SLUICE_CPP_MODULE_HPP
