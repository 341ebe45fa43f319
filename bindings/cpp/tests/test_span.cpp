// sluice::span (the C++17 fallback here; std::span in cxx20.cpp).
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "sluice_test.hpp"

TEST(Span, FromContainers) {
  std::vector<int> v{1, 2, 3};
  sluice::span<int> s(v);
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.data(), v.data());
  EXPECT_EQ(s.size_bytes(), 3 * sizeof(int));
  s[1] = 20;
  EXPECT_EQ(v[1], 20);

  const std::vector<int>& cv = v;
  sluice::span<const int> cs(cv);
  EXPECT_EQ(cs.size(), 3u);

  std::array<double, 4> a{};
  sluice::span<double> as(a);
  EXPECT_EQ(as.size(), 4u);

  int raw[5] = {};
  sluice::span<int> rs(raw);
  EXPECT_EQ(rs.size(), 5u);

  sluice::span<const int> widened = s;  // span<int> -> span<const int>
  EXPECT_EQ(widened.size(), 3u);
  EXPECT_EQ(s.subspan(1).size(), 2u);
  EXPECT_EQ(s.subspan(1, 1)[0], 20);
}

TEST(Span, Bytes) {
  std::vector<std::uint32_t> v{0x01020304u, 0x05060708u};
  sluice::ByteView b = sluice::as_bytes(sluice::span<const std::uint32_t>(v));
  EXPECT_EQ(b.size(), 8u);
  EXPECT_EQ(static_cast<const void*>(b.data()), static_cast<const void*>(v.data()));
  sluice::MutableByteView w = sluice::as_writable_bytes(sluice::span<std::uint32_t>(v));
  w[0] = std::byte{0xff};
  EXPECT_NE(v[0], 0x01020304u);
}

TEST(Span, ContiguousTraits) {
  using sluice::detail::contiguous_elem_t;
  static_assert(std::is_same<contiguous_elem_t<std::vector<int>>, int>::value, "vector");
  static_assert(std::is_same<contiguous_elem_t<const std::vector<int>>, const int>::value,
                "const vector");
  static_assert(std::is_same<contiguous_elem_t<std::string>, char>::value, "string");
  static_assert(std::is_same<contiguous_elem_t<float[3]>, float>::value, "array");
  SUCCEED();
}
