// Foreign memory (Buffer::wrap_device) and DLPack (to_dlpack, from_dlpack,
// DLPackTensor) on the host backend, whose "device" memory is host memory.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "sluice_test.hpp"

using sluice::BufferKind;
using sluice::DLPackFormat;
using sluice::ErrorCode;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 29u) ^ seed);
  return v;
}

std::uint64_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

TEST_F(SluiceTest, WrapDeviceIsABufferLikeAnyOther) {
  sluice::Stream s = sluice::Stream::create(dev_);
  const std::size_t n = 4096;
  std::unique_ptr<std::uint8_t[]> mem(new std::uint8_t[n]());
  int calls = 0;
  {
    sluice::Buffer b = sluice::Buffer::wrap_device(dev_, addr(mem.get()), n, [&] { ++calls; });
    sluice::BufferInfo info = b.info();
    EXPECT_EQ(info.kind, BufferKind::foreign);
    EXPECT_EQ(info.size, n);
    EXPECT_EQ(info.device_ptr, addr(mem.get()));
    EXPECT_EQ(info.host_ptr, nullptr);
    auto in = pattern(n, 5);
    sluice::copy_from_host(s, b, 0, in);
    auto out = sluice::read_vector<std::uint8_t>(s, b, 0, n);
    EXPECT_EQ(out, in);
    EXPECT_EQ(std::memcmp(mem.get(), in.data(), n), 0);  // it is the memory itself
    sluice::memset(s, b, 0, 0x11, 16);
    s.synchronize();
    EXPECT_EQ(calls, 0);
  }  // nothing outstanding: the release runs inside the destructor
  EXPECT_EQ(calls, 1);
}

TEST_F(SluiceTest, WrapDeviceReleaseRunsOnceAfterOutstandingWork) {
  sluice::Stream s = sluice::Stream::create(dev_);
  const std::size_t n = 1024;
  std::unique_ptr<std::uint8_t[]> mem(new std::uint8_t[n]());
  std::atomic<int> calls{0};
  std::promise<void> released;
  std::future<void> released_f = released.get_future();
  std::promise<void> gate;
  std::shared_future<void> gate_f = gate.get_future().share();
  {
    // A move-only callable: the box takes it by move.
    auto token = std::make_unique<int>(7);
    sluice::Buffer b = sluice::Buffer::wrap_device(
        dev_, addr(mem.get()), n, [&, token = std::move(token)] {
          EXPECT_EQ(*token, 7);
          calls.fetch_add(1);
          released.set_value();
        });
    sluice::SyncObject y = b.sync();
    s.host_callback([gate_f] { gate_f.wait(); }, {}, {y});
    sluice::memset(s, b, 0, 0x5A, n);
  }  // the handle goes; the work does not
  EXPECT_EQ(released_f.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "the release ran before the buffer's work completed";
  gate.set_value();
  ASSERT_EQ(released_f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(mem[i], 0x5A) << "byte " << i;
  s.synchronize();
  sleep_ms(10);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(SluiceTest, WrapDeviceErrorsDoNotCallTheRelease) {
  int calls = 0;
  std::uint8_t mem[64];
  auto r = sluice::Buffer::wrap_device(std::nothrow, dev_, 0, 64, [&] { ++calls; });
  EXPECT_EQ(r.code(), ErrorCode::null_argument);
  auto r2 = sluice::Buffer::wrap_device(std::nothrow, dev_, addr(mem), 0, [&] { ++calls; });
  EXPECT_EQ(r2.code(), ErrorCode::invalid_argument);
  auto r3 = sluice::Buffer::wrap_device(std::nothrow, dev_, ~std::uint64_t{0} - 8, 64,
                                        [&] { ++calls; });
  EXPECT_EQ(r3.code(), ErrorCode::out_of_range);
  EXPECT_SLUICE_THROW(sluice::Buffer::wrap_device(sluice::DeviceRef{}, addr(mem), 64, [&] { ++calls; }),
                      ErrorCode::invalid_handle);
  EXPECT_EQ(calls, 0);
  // No release function: the owner frees after the buffer.
  auto r4 = sluice::Buffer::wrap_device(std::nothrow, dev_, addr(mem), 64);
  ASSERT_TRUE(r4);
  EXPECT_EQ(r4->kind(), BufferKind::foreign);
}

TEST_F(SluiceTest, DLPackRoundTrip) {
  sluice::Stream s = sluice::Stream::create(dev_);
  for (DLPackFormat format : {DLPackFormat::versioned, DLPackFormat::unversioned}) {
    const std::size_t n = 256;
    auto in = pattern(n, static_cast<std::uint8_t>(format));
    sluice::DLPackTensor t;
    std::uint64_t where = 0;
    {
      sluice::Buffer b = sluice::Buffer::alloc(s, n);
      sluice::copy_from_host(s, b, 0, in);
      sluice::TensorDesc desc;
      desc.dtype_code = 2;
      desc.dtype_bits = 32;
      desc.shape = {4, 16};
      t = sluice::to_dlpack(b, s, format, &desc);
      where = b.info().device_ptr;
    }  // the tensor keeps the memory
    ASSERT_TRUE(t);
    EXPECT_EQ(t.format(), format);
    EXPECT_EQ(t.data(), where);
    EXPECT_EQ(t.device_type(), 1);  // kDLCPU on the host backend
    EXPECT_TRUE(t.compact());
    sluice::TensorDesc d = t.desc();
    EXPECT_EQ(d.dtype_code, 2);
    EXPECT_EQ(d.dtype_bits, 32);
    EXPECT_EQ(d.shape, (std::vector<std::int64_t>{4, 16}));
    if (format == DLPackFormat::versioned) {
      EXPECT_EQ(t.version().first, 1u);
    }

    sluice::Buffer back = sluice::from_dlpack(dev_, t, s);
    EXPECT_FALSE(t);  // the buffer owns it now
    EXPECT_EQ(back.kind(), BufferKind::foreign);
    EXPECT_EQ(back.size(), n);
    sluice::TensorDesc got = sluice::tensor_desc(back);
    EXPECT_EQ(got.dtype_bits, 32);
    EXPECT_EQ(got.shape, (std::vector<std::int64_t>{4, 16}));
    EXPECT_EQ(sluice::read_vector<std::uint8_t>(s, back, 0, n), in);

    // Re-export with the imported desc (nullptr), delete by RAII.
    {
      sluice::DLPackTensor t2 = sluice::to_dlpack(back);
      EXPECT_EQ(t2.desc().shape, (std::vector<std::int64_t>{4, 16}));
    }
  }
}

TEST_F(SluiceTest, DLPackErrors) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer b = sluice::Buffer::alloc(s, 64);
  EXPECT_EQ(sluice::tensor_desc(std::nothrow, b).code(), ErrorCode::not_found);
  sluice::TensorDesc big;
  big.dtype_code = 2;
  big.dtype_bits = 32;
  big.shape = {17};
  EXPECT_SLUICE_THROW(sluice::to_dlpack(b, s, DLPackFormat::versioned, &big),
                      ErrorCode::out_of_range);
  EXPECT_EQ(sluice::to_dlpack(std::nothrow, b, {}, static_cast<DLPackFormat>(9)).code(),
            ErrorCode::invalid_argument);
  // A failed import leaves the tensor to its owner (deleted here by RAII).
  sluice::DLPackTensor t = sluice::to_dlpack(b);
  sluice::DLPackTensor wrong(t.release(), DLPackFormat::versioned);
  auto r = sluice::from_dlpack(std::nothrow, sluice::DeviceRef{}, wrong);
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(wrong);
  // The rvalue overload deletes it with the failure.
  EXPECT_EQ(sluice::from_dlpack(std::nothrow, sluice::DeviceRef{}, std::move(wrong)).code(),
            ErrorCode::invalid_handle);
  EXPECT_FALSE(wrong);  // NOLINT(bugprone-use-after-move): moved into the call
  sluice::DLPackTensor empty;
  EXPECT_EQ(sluice::from_dlpack(std::nothrow, dev_, empty).code(), ErrorCode::null_argument);
}

// The capsule destructor for Python extensions is the library's own; without a
// CPython in the process it does nothing.
TEST_F(SluiceTest, DLPackCapsuleDestructorIsTheLibrarys) {
  EXPECT_EQ(sluice::dlpack_capsule_destructor(), &sluice_dlpack_capsule_destructor);
  int not_a_capsule = 0;
  sluice::dlpack_capsule_destructor()(&not_a_capsule);
}
