// Modules and launches: CUDA only; the host backend says so cleanly.
#include <cstdint>
#include <string>
#include <vector>

#include "sluice_test.hpp"

using sluice::ErrorCode;

TEST_F(SluiceTest, ModuleLoadIsUnsupportedOnHost) {
  const std::string ptx = ".version 7.0\n.target sm_50\n.address_size 64\n";
  auto r = sluice::Module::load(std::nothrow, dev_, ptx);
  ASSERT_EQ(r.code(), ErrorCode::unsupported);
  EXPECT_TRUE(contains(r.error().message(), "module")) << r.error().message();
  EXPECT_SLUICE_THROW(sluice::Module::load(dev_, ptx.data(), ptx.size() + 1),
                      ErrorCode::unsupported);
}

// Module::load(std::string) passes size() bytes, not the terminator too (a cubin or
// fatbin read into a string is exactly its bytes; the library adds PTX's NUL where
// it is missing). Observable on host: an empty string is an empty image, refused
// before the backend, as a 1-byte image (its NUL) would not be.
TEST_F(SluiceTest, ModuleLoadOfAStringPassesItsSizeOnly) {
  auto empty = sluice::Module::load(std::nothrow, dev_, std::string());
  ASSERT_EQ(empty.code(), ErrorCode::invalid_argument) << empty.error().message();
  EXPECT_TRUE(contains(empty.error().message(), "empty")) << empty.error().message();
  EXPECT_SLUICE_THROW(sluice::Module::load(dev_, std::string()), ErrorCode::invalid_argument);
  // The same as an empty byte view; a one-byte image (a lone NUL) reaches the backend.
  EXPECT_EQ(sluice::Module::load(std::nothrow, dev_, sluice::ByteView()).code(),
            ErrorCode::invalid_argument);
  const char nul = '\0';
  EXPECT_EQ(sluice::Module::load(std::nothrow, dev_, &nul, 1).code(), ErrorCode::unsupported);
  // A binary image with an embedded NUL and no terminator goes through whole.
  const std::string cubin("\x7f" "ELF\x02\x01\x01\0\0\0", 10);
  EXPECT_EQ(sluice::Module::load(std::nothrow, dev_, cubin).code(), ErrorCode::unsupported);
}

TEST_F(SluiceTest, LaunchWithoutAFunction) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Function none;
  int arg = 1;
  auto r = sluice::launch(std::nothrow, s, none, sluice::LaunchDims::linear(100, 32), {}, {}, arg);
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(sluice::launch(s, none, sluice::LaunchDims(), {}, {}),
                      ErrorCode::invalid_handle);
  sluice::Module m;
  EXPECT_EQ(m.function(std::nothrow, "k").code(), ErrorCode::invalid_handle);
  EXPECT_EQ(none.set_programmatic_launch(std::nothrow, true).code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(none.set_programmatic_launch(false), ErrorCode::invalid_handle);
  EXPECT_EQ(none.set_max_dynamic_shared_memory(std::nothrow, 65536).code(),
            ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(none.set_max_dynamic_shared_memory(65536), ErrorCode::invalid_handle);
  EXPECT_EQ(none.set_non_portable_cluster_size_allowed(std::nothrow, true).code(),
            ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(none.set_non_portable_cluster_size_allowed(false), ErrorCode::invalid_handle);
}

TEST(LaunchDims, Linear) {
  sluice::LaunchDims d = sluice::LaunchDims::linear(1000, 256);
  EXPECT_EQ(d.grid[0], 4u);
  EXPECT_EQ(d.block[0], 256u);
  EXPECT_EQ(d.grid[1], 1u);
  sluice_launch_dims_t raw = d.raw();
  EXPECT_EQ(raw.grid[0], 4u);
  EXPECT_EQ(raw.block[2], 1u);
  EXPECT_EQ(sluice::LaunchDims::linear(0, 128).grid[0], 1u);
  // Past 2^32-1 blocks the grid saturates (the driver then refuses it), never wraps.
  EXPECT_EQ(sluice::LaunchDims::linear(std::uint64_t{1} << 32, 1).grid[0], UINT32_MAX);
  EXPECT_EQ(sluice::LaunchDims::linear((std::uint64_t{1} << 40) + 1, 256).grid[0], UINT32_MAX);
  EXPECT_EQ(sluice::LaunchDims::linear(UINT64_MAX, 256).grid[0], UINT32_MAX);
}

// y[i] = a * x[i] + OFFSET; includes the built-in <sluice/rng.cuh>.
static const char* const kCompileSource =
    "#include <sluice/rng.cuh>\n"
    "extern \"C\" __global__ void scale_offset(float* y, const float* x, float a, unsigned n) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + OFFSET;\n"
    "}\n";

TEST_F(SluiceTest, ModuleCompileIsUnsupportedOnHost) {
  auto r = sluice::Module::compile(std::nothrow, dev_, kCompileSource, "scale_offset.cu",
                                   {"-DOFFSET=1.0f"});
  ASSERT_EQ(r.code(), ErrorCode::unsupported);
  EXPECT_TRUE(contains(r.error().message(), "host")) << r.error().message();
  EXPECT_TRUE(contains(r.error().message(), "sluice_module_compile")) << r.error().message();
  EXPECT_SLUICE_THROW(sluice::Module::compile(dev_, std::string(kCompileSource)),
                      ErrorCode::unsupported);
  EXPECT_EQ(sluice::Module::compile(std::nothrow, dev_, "").code(), ErrorCode::invalid_argument);
  EXPECT_EQ(sluice::Module::compile(std::nothrow, dev_, static_cast<const char*>(nullptr)).code(),
            ErrorCode::null_argument);
}

// On the device SLUICE_BACKEND names (cuda in the GPU suite): compile, launch, check;
// a syntax error gives ErrorCode::compile with the log.
TEST(ModuleCompile, RunsAKernelOnCuda) {
  sluice::Device dev = sluice::Device::open_default();
  if (dev.props().backend != sluice::Backend::cuda) GTEST_SKIP() << "cuda backend only";
  sluice::Module m = sluice::Module::compile(dev, kCompileSource, "scale_offset.cu",
                                             {"-DOFFSET=0.5f", "--std=c++17"});
  sluice::Function f = m.function("scale_offset");
  sluice::Stream s = sluice::Stream::create(dev);
  constexpr unsigned n = 3001;
  std::vector<float> x(n);
  for (unsigned i = 0; i < n; ++i) x[i] = static_cast<float>(i % 97);
  sluice::Buffer xb = sluice::Buffer::alloc(s, n * sizeof(float));
  sluice::Buffer yb = sluice::Buffer::alloc(s, n * sizeof(float));
  sluice::copy_from_host(s, xb, 0, x);
  sluice::SyncObject xs = xb.sync();
  sluice::SyncObject ys = yb.sync();
  std::uint64_t py = yb.info().device_ptr;
  std::uint64_t px = xb.info().device_ptr;
  // Programmatic dependent launch from compute capability 9.0 (this kernel does
  // not wait for the one ahead: off again before it runs).
  auto pdl = f.set_programmatic_launch(std::nothrow, true);
  EXPECT_EQ(pdl.code(), dev.props().compute_capability_major >= 9 ? ErrorCode::ok
                                                                  : ErrorCode::unsupported);
  f.set_programmatic_launch(false);
  sluice::launch(s, f, sluice::LaunchDims::linear(n, 256), {xs}, {ys}, py, px, 2.0f, n);
  std::vector<float> y(n);
  sluice::copy_to_host(s, y, yb, 0);
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(y[i], 2.0f * x[i] + 0.5f) << "y[" << i << "]";

  auto bad = sluice::Module::compile(std::nothrow, dev,
                                     "extern \"C\" __global__ void k(int* p) { *p = }",
                                     "broken.cu");
  ASSERT_EQ(bad.code(), ErrorCode::compile);
  EXPECT_TRUE(contains(bad.error().message(), "broken.cu(")) << bad.error().message();
}

// 64 KiB of dynamic shared memory: s[i] = 3i, then out[i] = s[n - 1 - i].
static const char* const kBigSharedSource =
    "extern \"C\" __global__ void big(unsigned *out) {\n"
    "  extern __shared__ unsigned s[];\n"
    "  unsigned n = 64 * 1024 / 4;\n"
    "  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) s[i] = i * 3u;\n"
    "  __syncthreads();\n"
    "  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];\n"
    "}\n";

// A launch over 48 KiB of dynamic shared memory fails until the function opts in,
// then runs; more than the device allows is ErrorCode::invalid_argument.
TEST(ModuleCompile, MoreThan48KiBOfDynamicSharedMemoryOnCuda) {
  sluice::Device dev = sluice::Device::open_default();
  if (dev.props().backend != sluice::Backend::cuda) GTEST_SKIP() << "cuda backend only";
  sluice::Module m = sluice::Module::compile(dev, kBigSharedSource, "big.cu");
  sluice::Function f = m.function("big");
  sluice::Stream s = sluice::Stream::create(dev);
  constexpr std::uint32_t bytes = 64 * 1024;
  sluice::Buffer out = sluice::Buffer::alloc(s, bytes);
  sluice::SyncObject os = out.sync();
  std::uint64_t po = out.info().device_ptr;
  sluice::LaunchDims dims;
  dims.block[0] = 256;
  dims.shared_mem_bytes = bytes;
  EXPECT_EQ(sluice::launch(std::nothrow, s, f, dims, {}, {os}, po).code(), ErrorCode::driver);
  f.set_max_dynamic_shared_memory(bytes);
  sluice::launch(s, f, dims, {}, {os}, po);
  std::vector<std::uint32_t> got(bytes / 4);
  sluice::copy_to_host(s, got, out, 0);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<std::uint32_t>(got.size() - 1 - i) * 3u) << "out[" << i << "]";
  }
  auto over = f.set_max_dynamic_shared_memory(std::nothrow, 1u << 30);
  ASSERT_EQ(over.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(over.error().message(), "the device allows at most"))
      << over.error().message();
}
