// DLPack: sluice::DLPackTensor (an owned managed tensor, RAII), export of a buffer
// (to_dlpack), import as a buffer (from_dlpack), and the dtype and shape of an
// imported buffer (tensor_desc).
//
//   sluice::DLPackTensor t = sluice::to_dlpack(buf, consumer_stream);
//   some_framework_take(t.release());          // the consumer calls the deleter
//   sluice::Buffer b = sluice::from_dlpack(dev, std::move(t2), producer_stream);
//
// sluice.h takes managed tensors as `void *`, so this header declares the layout of
// the official dlpack.h (1.x `DLManagedTensorVersioned`, 0.x `DLManagedTensor`) in
// sluice::detail, under names of its own: it may be included beside dlpack.h.
#ifndef SLUICE_CPP_DLPACK_HPP
#define SLUICE_CPP_DLPACK_HPP

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "sluice/buffer.hpp"
#include "sluice/config.hpp"
#include "sluice/device.hpp"
#include "sluice/result.hpp"
#include "sluice/stream.hpp"

namespace sluice {

/// Which DLPack struct a managed-tensor pointer is (`SLUICE_DLPACK_*`).
enum class DLPackFormat : std::uint32_t {
  versioned = SLUICE_DLPACK_VERSIONED,      ///< `DLManagedTensorVersioned` (DLPack 1.x)
  unversioned = SLUICE_DLPACK_UNVERSIONED,  ///< `DLManagedTensor` (DLPack 0.x)
};

/// A tensor's element type and row-major shape, as DLPack describes it.
struct TensorDesc {
  std::uint8_t dtype_code = 1;   ///< DLDataTypeCode: 0 int, 1 uint, 2 float, 4 bfloat, ...
  std::uint8_t dtype_bits = 8;   ///< bits per lane (whole bytes with the lanes)
  std::uint16_t dtype_lanes = 1; ///< lanes per element
  std::vector<std::int64_t> shape;  ///< sizes, outermost first (empty: a scalar)
  bool read_only = false;           ///< the producer marked it read-only (not enforced)
};

namespace detail {

// dlpack.h's layout, under sluice's own names.
struct DlDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DlDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DlTensor {
  void* data;
  DlDevice device;
  std::int32_t ndim;
  DlDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct DlManagedVersioned {
  struct {
    std::uint32_t major, minor;
  } version;
  void* manager_ctx;
  void (*deleter)(DlManagedVersioned*);
  std::uint64_t flags;
  DlTensor dl_tensor;
};
struct DlManaged {
  DlTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DlManaged*);
};

}  // namespace detail

/// An owned DLPack managed tensor: its destructor calls the tensor's deleter, unless
/// ownership went elsewhere (release(), or a successful from_dlpack). Move-only.
class DLPackTensor {
 public:
  DLPackTensor() noexcept = default;
  /// Takes ownership of `tensor` (a managed tensor of `format`).
  DLPackTensor(void* tensor, DLPackFormat format) noexcept : t_(tensor), format_(format) {}

  DLPackTensor(const DLPackTensor&) = delete;
  DLPackTensor& operator=(const DLPackTensor&) = delete;
  DLPackTensor(DLPackTensor&& o) noexcept : t_(o.release()), format_(o.format_) {}
  DLPackTensor& operator=(DLPackTensor&& o) noexcept {
    if (this != &o) {
      reset();
      format_ = o.format_;
      t_ = o.release();
    }
    return *this;
  }
  ~DLPackTensor() { reset(); }

  /// The managed tensor (`DLManagedTensorVersioned*` or `DLManagedTensor*`), still owned.
  void* get() const noexcept { return t_; }
  DLPackFormat format() const noexcept { return format_; }
  explicit operator bool() const noexcept { return t_ != nullptr; }

  /// Gives the tensor away (to a consumer that will call its deleter); empty afterwards.
  void* release() noexcept {
    void* t = t_;
    t_ = nullptr;
    return t;
  }

  /// Calls the deleter now (if any); empty afterwards.
  void reset() noexcept {
    void* t = release();
    if (!t) return;
    if (format_ == DLPackFormat::versioned) {
      auto* v = static_cast<detail::DlManagedVersioned*>(t);
      if (v->deleter) v->deleter(v);
    } else {
      auto* u = static_cast<detail::DlManaged*>(t);
      if (u->deleter) u->deleter(u);
    }
  }

  /// The address of the first element (data + byte_offset); 0 when empty.
  std::uint64_t data() const noexcept {
    const detail::DlTensor* d = dl();
    return d ? reinterpret_cast<std::uintptr_t>(d->data) + d->byte_offset : 0;
  }
  /// DLDeviceType (1 kDLCPU, 2 kDLCUDA, 3 kDLCUDAHost) and ordinal.
  std::int32_t device_type() const noexcept { return dl() ? dl()->device.device_type : 0; }
  std::int32_t device_id() const noexcept { return dl() ? dl()->device.device_id : 0; }
  /// NULL strides: compact row-major.
  bool compact() const noexcept { return dl() && dl()->strides == nullptr; }
  /// The DLPack version of a versioned tensor; {0, 0} otherwise.
  std::pair<std::uint32_t, std::uint32_t> version() const noexcept {
    if (!t_ || format_ != DLPackFormat::versioned) return {0, 0};
    auto* v = static_cast<const detail::DlManagedVersioned*>(t_);
    return {v->version.major, v->version.minor};
  }
  /// The dtype and shape.
  TensorDesc desc() const {
    TensorDesc out;
    const detail::DlTensor* d = dl();
    if (!d) return out;
    out.dtype_code = d->dtype.code;
    out.dtype_bits = d->dtype.bits;
    out.dtype_lanes = d->dtype.lanes;
    if (d->ndim > 0 && d->shape) out.shape.assign(d->shape, d->shape + d->ndim);
    if (format_ == DLPackFormat::versioned) {
      out.read_only = (static_cast<const detail::DlManagedVersioned*>(t_)->flags & 1u) != 0;
    }
    return out;
  }

 private:
  const detail::DlTensor* dl() const noexcept {
    if (!t_) return nullptr;
    if (format_ == DLPackFormat::versioned) {
      return &static_cast<const detail::DlManagedVersioned*>(t_)->dl_tensor;
    }
    return &static_cast<const detail::DlManaged*>(t_)->dl_tensor;
  }

  void* t_ = nullptr;
  DLPackFormat format_ = DLPackFormat::versioned;
};

/// Exports `buffer` as a managed tensor (sluice_buffer_to_dlpack): `kDLCPU` on the
/// host backend; on cuda `kDLCUDA` for device and foreign buffers, `kDLCUDAHost` for
/// pinned and registered ones. `desc` (nullptr: the buffer's own from a DLPack
/// import, else 1-D uint8 of its size) must fit in the buffer.
///
/// With a `consumer` stream, it waits on the device for every pending write and
/// read of the buffer (no host block); with an empty StreamRef the call blocks until
/// that work completed (what a CPU consumer needs). The tensor keeps the buffer's
/// memory alive until its deleter runs, so the Buffer may be destroyed first.
inline Result<DLPackTensor> to_dlpack(std::nothrow_t, BufferRef buffer, StreamRef consumer = {},
                                      DLPackFormat format = DLPackFormat::versioned,
                                      const TensorDesc* desc = nullptr) {
  sluice_tensor_desc_t cd{};
  if (desc) {
    cd.dtype_code = desc->dtype_code;
    cd.dtype_bits = desc->dtype_bits;
    cd.dtype_lanes = desc->dtype_lanes;
    cd.ndim = static_cast<std::int32_t>(desc->shape.size());
    cd.shape = desc->shape.data();
    cd.read_only = desc->read_only ? 1u : 0u;
  }
  void* t = nullptr;
  if (sluice_error_t* e = sluice_buffer_to_dlpack(buffer.raw(), consumer.raw(),
                                                  static_cast<std::uint32_t>(format),
                                                  desc ? &cd : nullptr, &t)) {
    return Error::adopt(e);
  }
  return DLPackTensor(t, format);
}

/// Imports a managed tensor as a buffer (sluice_buffer_from_dlpack). On success the
/// Buffer owns the tensor (its deleter runs after the Buffer is destroyed and its
/// last use completed) and `tensor` becomes empty; on error `tensor` keeps it.
/// `ready_on` is the stream named to the producer (empty: the data is ready).
inline Result<Buffer> from_dlpack(std::nothrow_t, DeviceRef device, DLPackTensor& tensor,
                                  StreamRef ready_on = {}) {
  sluice_buffer_t b{};
  if (sluice_error_t* e =
          sluice_buffer_from_dlpack(device.raw(), tensor.get(),
                                    static_cast<std::uint32_t>(tensor.format()), ready_on.raw(),
                                    &b)) {
    return Error::adopt(e);
  }
  (void)tensor.release();  // the buffer owns it now
  return Buffer::adopt(b);
}

/// from_dlpack for an rvalue: on error the tensor is deleted with it.
inline Result<Buffer> from_dlpack(std::nothrow_t, DeviceRef device, DLPackTensor&& tensor,
                                  StreamRef ready_on = {}) {
  DLPackTensor t = std::move(tensor);
  return from_dlpack(std::nothrow, device, t, ready_on);
}

/// The dtype and shape a buffer was imported with (sluice_buffer_tensor);
/// ErrorCode::not_found for a buffer that did not come from DLPack.
inline Result<TensorDesc> tensor_desc(std::nothrow_t, BufferRef buffer) {
  sluice_tensor_desc_t d{};
  if (sluice_error_t* e = sluice_buffer_tensor(buffer.raw(), &d)) return Error::adopt(e);
  TensorDesc out;
  out.dtype_code = d.dtype_code;
  out.dtype_bits = d.dtype_bits;
  out.dtype_lanes = d.dtype_lanes;
  if (d.ndim > 0 && d.shape) out.shape.assign(d.shape, d.shape + d.ndim);
  out.read_only = d.read_only != 0;
  return out;
}

/// The PyCapsule destructor for DLPack capsules made over to_dlpack's tensors by
/// a Python extension (pybind11, nanobind): `PyCapsule_New(tensor.release(),
/// "dltensor_versioned", sluice::dlpack_capsule_destructor())`. Native, so it runs
/// while a Python exception is pending (sluice_dlpack_capsule_destructor).
inline void (*dlpack_capsule_destructor() noexcept)(void*) {
  return &sluice_dlpack_capsule_destructor;
}

#if SLUICE_CPP_EXCEPTIONS
inline DLPackTensor to_dlpack(BufferRef buffer, StreamRef consumer = {},
                              DLPackFormat format = DLPackFormat::versioned,
                              const TensorDesc* desc = nullptr) {
  return to_dlpack(std::nothrow, buffer, consumer, format, desc).value();
}
inline Buffer from_dlpack(DeviceRef device, DLPackTensor& tensor, StreamRef ready_on = {}) {
  return from_dlpack(std::nothrow, device, tensor, ready_on).value();
}
inline Buffer from_dlpack(DeviceRef device, DLPackTensor&& tensor, StreamRef ready_on = {}) {
  return from_dlpack(std::nothrow, device, std::move(tensor), ready_on).value();
}
inline TensorDesc tensor_desc(BufferRef buffer) {
  return tensor_desc(std::nothrow, buffer).value();
}
#endif

}  // namespace sluice

#endif  // SLUICE_CPP_DLPACK_HPP
