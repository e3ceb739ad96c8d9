// Checks of the GPU test harness itself, so a kernel test cannot pass by accident.
#include <cstring>

#include "gpu/gpu_test_util.hpp"

using namespace sparrow;

TEST(GpuHarness, PoisonIsNaNAndIsCaught) {
  test::DeviceMatrix d = test::DeviceMatrix::alloc(DType::fp16, 3, 5);
  d.poison();
  HostMatrix h = d.download();
  EXPECT_TRUE(std::isnan(h.at(2, 4)));
  std::vector<double> ref(15, 1.0);
  EXPECT_FALSE(reference::normalized_error(h.view(), ref) < 1.0);
}

TEST(GpuHarness, MatmulRejectsHostWeight) {
  auto w = encode(Format::dense, patterns::random(DType::fp16, 8, 8, 0.5, 1).view());
  ASSERT_TRUE(w.ok());
  test::DeviceMatrix x = test::DeviceMatrix::alloc(DType::fp16, 2, 8);
  test::DeviceMatrix y = test::DeviceMatrix::alloc(DType::fp16, 2, 8);
  Status s = matmul(y.view, w.value(), x.view, nullptr);
  EXPECT_FALSE(s.ok());
}

// Uploads of 4 MB and more go through a ring of page-locked slots (16 MB each, two of them): the
// sizes below take the plain path, exactly one slot, a slot and a byte, and several rounds of the
// ring with a ragged end; every byte must arrive where it belongs.
TEST(GpuHarness, UploadsArriveWholeThroughTheStagingRing) {
  for (size_t bytes : {size_t(4 << 20) - 1, size_t(16) << 20, (size_t(16) << 20) + 1,
                       (size_t(37) << 20) + 13}) {
    std::vector<uint8_t> h(bytes);
    uint32_t s = uint32_t(bytes);
    for (auto& b : h) {
      s = s * 1664525u + 1013904223u;
      b = uint8_t(s >> 24);
    }
    const Buffer<uint8_t> host(h);
    auto dev = host.to_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    auto back = dev.value().to_host();
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back.value().host().size(), bytes);
    size_t first_bad = bytes;
    for (size_t i = 0; i < bytes && first_bad == bytes; ++i)
      if (back.value().host()[i] != h[i]) first_bad = i;
    EXPECT_EQ(first_bad, bytes) << bytes << " bytes: first wrong byte at " << first_bad;
  }
}

// to_device(Weight&&) uploads from the weight's own arrays (no host copy first): the result must
// hold what the copying overload's does, for every format.
TEST(GpuHarness, MovedWeightsUploadLikeCopiedOnes) {
  const HostMatrix h = patterns::random(DType::fp16, 37, 70, 0.6, 21);
  for (Format f : kAllFormats) {
    auto w = encode(f, h.view());
    if (!w.ok()) continue;  // a format that does not take this shape (nm: not 2:4)
    auto copied = to_device(w.value());
    auto moved = to_device(Weight(w.value()));
    ASSERT_TRUE(copied.ok() && moved.ok()) << format_name(f);
    EXPECT_EQ(location_of(moved.value()), Location::device) << format_name(f);
    auto a = to_host(copied.value()), b = to_host(moved.value());
    ASSERT_TRUE(a.ok() && b.ok()) << format_name(f);
    auto da = decode(a.value()), db = decode(b.value());
    ASSERT_TRUE(da.ok() && db.ok()) << format_name(f);
    EXPECT_EQ(std::memcmp(da->data(), db->data(), size_t(37 * 70 * 2)), 0) << format_name(f);
    auto dw = decode(w.value());
    ASSERT_TRUE(dw.ok());
    EXPECT_EQ(std::memcmp(dw->data(), db->data(), size_t(37 * 70 * 2)), 0) << format_name(f);
  }
}
