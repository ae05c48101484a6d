// Tests for the reference (de)quantization: hand-built blocks decoded against values derived
// from the format definitions, and quantize/dequantize round trips with error bounds.
#include "core/quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/fp16.h"

namespace crossword {
namespace {

std::vector<float> Dequant(GgmlType type, const void* src, int64_t n) {
  std::vector<float> out(n);
  DequantizeRow(type, src, out.data(), n);
  return out;
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Element e of a K-quant super-block lives in 64-element chunk e/64; within the chunk, the
// first 32 elements use the low nibbles of 32 bytes and the next 32 the high nibbles.
int Nibble(const uint8_t* qs, int e) {
  const uint8_t byte = qs[(e / 64) * 32 + (e % 32)];
  return (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
}

TEST(Quant, Q4_0HandBuiltBlock) {
  BlockQ4_0 b;
  b.d = F32ToF16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = Dequant(GgmlType::kQ4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f) << j;
  }
}

TEST(Quant, Q4_1AndQ5HandBuiltBlocks) {
  BlockQ4_1 a;
  a.d = F32ToF16(0.25f);
  a.m = F32ToF16(-1.0f);
  for (int j = 0; j < 16; ++j) a.qs[j] = static_cast<uint8_t>(j | (3 << 4));
  auto ya = Dequant(GgmlType::kQ4_1, &a, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(ya[j], j * 0.25f - 1.0f);
    EXPECT_EQ(ya[j + 16], 3 * 0.25f - 1.0f);
  }
  // Q5_0: element j's fifth bit is bit j of qh (little-endian uint32).
  BlockQ5_0 b;
  b.d = F32ToF16(2.0f);
  const uint32_t qh = 0xA5A5F00Fu;
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((j & 0xF) | (((j * 7) & 0xF) << 4));
  auto yb = Dequant(GgmlType::kQ5_0, &b, 32);
  for (int e = 0; e < 32; ++e) {
    const int low = e < 16 ? (e & 0xF) : ((e - 16) * 7) & 0xF;
    const int q = low | (((qh >> e) & 1) << 4);
    EXPECT_EQ(yb[e], (q - 16) * 2.0f) << e;
  }
  BlockQ5_1 c;
  c.d = F32ToF16(0.125f);
  c.m = F32ToF16(3.0f);
  std::memcpy(c.qh, &qh, 4);
  std::memcpy(c.qs, b.qs, 16);
  auto yc = Dequant(GgmlType::kQ5_1, &c, 32);
  for (int e = 0; e < 32; ++e) {
    const int low = e < 16 ? (e & 0xF) : ((e - 16) * 7) & 0xF;
    const int q = low | (((qh >> e) & 1) << 4);
    EXPECT_EQ(yc[e], q * 0.125f + 3.0f) << e;
  }
}

TEST(Quant, Q8_0AndQ8_1HandBuiltBlocks) {
  BlockQ8_0 b;
  b.d = F32ToF16(0.0625f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  auto y = Dequant(GgmlType::kQ8_0, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.0625f);
  BlockQ8_1 c;
  c.d = b.d;
  c.s = F32ToF16(100.0f);  // the sum field does not enter the values
  std::memcpy(c.qs, b.qs, 32);
  EXPECT_EQ(Dequant(GgmlType::kQ8_1, &c, 32), y);
}

TEST(Quant, Q4_KHandBuiltBlock) {
  BlockQ4_K b;
  b.d = F32ToF16(0.5f);
  b.dmin = F32ToF16(0.25f);
  // Sub-block s has scale sc[s] and min mn[s] (6 bits each), packed per the format: s < 4 in the
  // low 6 bits of bytes s and s+4; s >= 4 as low nibbles in byte s+4 and top 2 bits in the
  // upper bits of bytes s-4 (scale) and s (min).
  const int sc[8] = {1, 17, 33, 63, 5, 40, 0, 62};
  const int mn[8] = {0, 63, 2, 31, 48, 7, 16, 1};
  std::memset(b.scales, 0, sizeof(b.scales));
  for (int s = 0; s < 4; ++s) {
    b.scales[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    b.scales[s + 4] = static_cast<uint8_t>(mn[s] | ((mn[s + 4] >> 4) << 6));
    b.scales[s + 8] = static_cast<uint8_t>((sc[s + 4] & 0xF) | ((mn[s + 4] & 0xF) << 4));
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i * 37 + 11) & 0xFF);
  auto y = Dequant(GgmlType::kQ4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    const float expect = 0.5f * sc[s] * Nibble(b.qs, e) - 0.25f * mn[s];
    EXPECT_EQ(y[e], expect) << e;
  }
}

TEST(Quant, Q5_KHandBuiltBlock) {
  BlockQ5_K b;
  b.d = F32ToF16(0.25f);
  b.dmin = F32ToF16(0.5f);
  const int sc[8] = {3, 9, 27, 60, 18, 33, 50, 1};
  const int mn[8] = {4, 0, 63, 20, 19, 36, 2, 45};
  for (int s = 0; s < 4; ++s) {
    b.scales[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    b.scales[s + 4] = static_cast<uint8_t>(mn[s] | ((mn[s + 4] >> 4) << 6));
    b.scales[s + 8] = static_cast<uint8_t>((sc[s + 4] & 0xF) | ((mn[s + 4] & 0xF) << 4));
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i * 53 + 7) & 0xFF);
  for (int i = 0; i < 32; ++i) b.qh[i] = static_cast<uint8_t>((i * 29 + 3) & 0xFF);
  auto y = Dequant(GgmlType::kQ5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;  // sub-block s takes its 5th bit from bit s of qh[e % 32]
    const int q = Nibble(b.qs, e) | (((b.qh[e % 32] >> s) & 1) << 4);
    EXPECT_EQ(y[e], 0.25f * sc[s] * q - 0.5f * mn[s]) << e;
  }
}

TEST(Quant, Q6_KHandBuiltBlock) {
  BlockQ6_K b;
  b.d = F32ToF16(0.125f);
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(i * 17 - 128);
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>((i * 71 + 5) & 0xFF);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>((i * 13 + 200) & 0xFF);
  auto y = Dequant(GgmlType::kQ6_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    // 128-element halves; inside a half, element r = e % 128 takes its low nibble from
    // ql[half*64 + r % 64] (low nibble for r < 64, high for r >= 64) and its two high bits from
    // qh[half*32 + r % 32], bit pair r / 32. Scales cover 16 elements each.
    const int half = e / 128, r = e % 128;
    const uint8_t l = b.ql[half * 64 + r % 64];
    const int low = r < 64 ? (l & 0xF) : (l >> 4);
    const int high = (b.qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
    const int q = (low | (high << 4)) - 32;
    EXPECT_EQ(y[e], 0.125f * b.scales[e / 16] * q) << e;
  }
}

TEST(Quant, Q2_KHandBuiltBlock) {
  BlockQ2_K b;
  b.d = F32ToF16(0.5f);
  b.dmin = F32ToF16(0.125f);
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<uint8_t>((i * 5 + 1) & 0xFF);
  for (int i = 0; i < 64; ++i) b.qs[i] = static_cast<uint8_t>((i * 89 + 17) & 0xFF);
  auto y = Dequant(GgmlType::kQ2_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    // 128-element halves use 32 bytes each; r / 32 selects the 2-bit plane, r % 32 the byte.
    const int half = e / 128, r = e % 128;
    const int q = (b.qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
    const uint8_t s = b.scales[e / 16];
    EXPECT_EQ(y[e], 0.5f * (s & 0xF) * q - 0.125f * (s >> 4)) << e;
  }
}

TEST(Quant, Q3_KHandBuiltBlock) {
  BlockQ3_K b;
  b.d = F32ToF16(0.25f);
  // 16 6-bit scales, stored biased by 32: low nibbles of 0..7 in bytes 0..7 (sub-blocks 8..15 in
  // their high nibbles), top two bits of sub-block s in byte 8 + s % 4, bit pair s / 4.
  int sc[16];
  for (int s = 0; s < 16; ++s) sc[s] = (s * 23 + 5) % 64;
  std::memset(b.scales, 0, 12);
  for (int s = 0; s < 16; ++s) {
    b.scales[s % 8] |= static_cast<uint8_t>((sc[s] & 0xF) << (s < 8 ? 0 : 4));
    b.scales[8 + s % 4] |= static_cast<uint8_t>((sc[s] >> 4) << (2 * (s / 4)));
  }
  for (int i = 0; i < 64; ++i) b.qs[i] = static_cast<uint8_t>((i * 45 + 9) & 0xFF);
  for (int i = 0; i < 32; ++i) b.hmask[i] = static_cast<uint8_t>((i * 77 + 1) & 0xFF);
  auto y = Dequant(GgmlType::kQ3_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, r = e % 128;
    const int low = (b.qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
    const bool high = (b.hmask[e % 32] >> (e / 32)) & 1;  // plane e / 32 of 8
    const int q = low - (high ? 0 : 4);
    EXPECT_EQ(y[e], 0.25f * (sc[e / 16] - 32) * q) << e;
  }
}

TEST(Quant, Q8_KHandBuiltBlockAndQuantizer) {
  BlockQ8_K b;
  b.d = 0.03125f;
  for (int i = 0; i < 256; ++i) b.qs[i] = static_cast<int8_t>(i - 128);
  auto y = Dequant(GgmlType::kQ8_K, &b, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], (i - 128) * 0.03125f);
  // Quantizer: d = 1 / (-127 / max) with max the element of largest magnitude (sign kept), so
  // that element always becomes -127 and every q = nearest(x / d).
  auto x = RandomFloats(512, 7);
  x[300] = -9.0f;  // the largest magnitude in block 1, negative
  std::vector<BlockQ8_K> q(2);
  QuantizeRow(GgmlType::kQ8_K, x.data(), q.data(), 512);
  EXPECT_EQ(q[1].d, 1.0f / (-127.0f / -9.0f));
  EXPECT_EQ(q[1].qs[300 - 256], -127);
  for (int blk = 0; blk < 2; ++blk) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += q[blk].qs[16 * g + l];
      EXPECT_EQ(q[blk].bsums[g], sum);
    }
    for (int l = 0; l < 256; ++l) {
      EXPECT_LE(std::fabs(x[blk * 256 + l] - q[blk].d * q[blk].qs[l]),
                std::fabs(q[blk].d) * 0.5001f);
    }
  }
}

TEST(Quant, FloatFormats) {
  const float v[4] = {1.0f, -2.5f, 65504.0f, 1e-8f};
  uint16_t h[4];
  QuantizeRow(GgmlType::kF16, v, h, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h[i], F32ToF16(v[i]));
  auto y = Dequant(GgmlType::kF16, h, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.5f);
  EXPECT_EQ(y[2], 65504.0f);
  QuantizeRow(GgmlType::kBF16, v, h, 4);
  EXPECT_EQ(h[0], 0x3f80);
  EXPECT_EQ(Dequant(GgmlType::kBF16, h, 1)[0], 1.0f);
  const double d[2] = {0.5, -3.25};
  auto yd = Dequant(GgmlType::kF64, d, 2);
  EXPECT_EQ(yd[1], -3.25f);
}

// Values exactly on a block's grid survive a round trip unchanged.
TEST(Quant, GridValuesRoundTripExactly) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>((j % 16) - 8) * 0.25f;  // max |x| = -2
  BlockQ4_0 b4;
  QuantizeRow(GgmlType::kQ4_0, x.data(), &b4, 32);
  EXPECT_EQ(F16ToF32(b4.d), 0.25f);
  EXPECT_EQ(Dequant(GgmlType::kQ4_0, &b4, 32), x);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j * 8 - 127) / 64.0f;
  BlockQ8_0 b8;
  QuantizeRow(GgmlType::kQ8_0, x.data(), &b8, 32);
  auto y = Dequant(GgmlType::kQ8_0, &b8, 32);
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(y[j], x[j], 1e-3f);
}

struct RoundTripCase {
  GgmlType type;
  double max_rel_rmse;  // RMSE / RMS of the input, for Gaussian data
};

TEST(Quant, RoundTripErrorBounds) {
  // Bounds: Q8 formats keep ~1/255 of the range (rel. RMSE < 1%); 4-bit formats ~1/15 of the
  // range; 6-bit ~1/63; the K-quant searches beat the plain absmax rule.
  const RoundTripCase cases[] = {
      {GgmlType::kF16, 1e-3},  {GgmlType::kBF16, 5e-3}, {GgmlType::kQ8_0, 0.01},
      {GgmlType::kQ8_1, 0.01}, {GgmlType::kQ8_K, 0.01}, {GgmlType::kQ6_K, 0.04},
      {GgmlType::kQ5_0, 0.07}, {GgmlType::kQ5_1, 0.07}, {GgmlType::kQ5_K, 0.07},
      {GgmlType::kQ4_K, 0.12}, {GgmlType::kQ4_0, 0.15}, {GgmlType::kQ4_1, 0.15},
  };
  const int64_t n = 4096;
  for (const auto& c : cases) {
    for (float scale : {1e-3f, 1.0f, 300.0f}) {
      auto x = RandomFloats(n, 11, scale);
      std::vector<std::byte> q(*RowBytes(c.type, n));
      QuantizeRow(c.type, x.data(), q.data(), n);
      auto y = Dequant(c.type, q.data(), n);
      double err = 0, ref = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(y[i]));
        err += (y[i] - x[i]) * double(y[i] - x[i]);
        ref += double(x[i]) * x[i];
      }
      EXPECT_LT(std::sqrt(err / ref), c.max_rel_rmse) << TypeName(c.type) << " scale " << scale;
      EXPECT_GT(std::sqrt(err / ref), 0.0) << TypeName(c.type) << " should not be lossless";
    }
  }
}

TEST(Quant, ZerosAndUnalignedBuffers) {
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K,
                     GgmlType::kQ8_K, GgmlType::kQ5_1}) {
    const int64_t n = 512;
    std::vector<float> zeros(n, 0.0f);
    const size_t bytes = *RowBytes(t, n);
    std::vector<std::byte> buf(bytes + 1, std::byte{0x5a});
    QuantizeRow(t, zeros.data(), buf.data() + 1, n);  // unaligned destination
    std::vector<float> y(n, 1.0f);
    DequantizeRow(t, buf.data() + 1, y.data(), n);  // unaligned source
    for (float v : y) ASSERT_EQ(v, 0.0f) << TypeName(t);
    // Unaligned and aligned paths agree on real data.
    auto x = RandomFloats(n, 5);
    std::vector<std::byte> aligned(bytes);
    QuantizeRow(t, x.data(), aligned.data(), n);
    QuantizeRow(t, x.data(), buf.data() + 1, n);
    EXPECT_EQ(std::memcmp(aligned.data(), buf.data() + 1, bytes), 0) << TypeName(t);
  }
}

// A zero-element tensor is legal GGUF and its data pointer may be null (the GGUF fuzzer found
// memcpy(nullptr, nullptr, 0) here, undefined behaviour): zero elements touch nothing.
TEST(Quant, ZeroElementsTouchNothing) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kF64,
                     GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    EXPECT_NO_THROW(DequantizeRow(t, nullptr, nullptr, 0)) << TypeName(t);
    if (CanQuantize(t)) {
      EXPECT_NO_THROW(QuantizeRow(t, nullptr, nullptr, 0)) << TypeName(t);
    }
  }
  EXPECT_THROW(DequantizeRow(GgmlType::kI32, nullptr, nullptr, 0), Error);  // type still checked
}

TEST(Quant, BadArgumentsThrow) {
  float x[64] = {};
  std::byte out[512];
  EXPECT_THROW(QuantizeRow(GgmlType::kQ4_0, x, out, 33), Error);
  EXPECT_THROW(QuantizeRow(GgmlType::kQ2_K, x, out, 256), Error);
  EXPECT_THROW(DequantizeRow(GgmlType::kI32, out, x, 4), Error);
  EXPECT_THROW(DequantizeRow(GgmlType::kQ4_K, out, x, 64), Error);
  EXPECT_FALSE(CanQuantize(GgmlType::kQ3_K));
  EXPECT_TRUE(CanQuantize(GgmlType::kQ5_K));
  EXPECT_TRUE(CanDequantize(GgmlType::kQ3_K));
}

// ---- Independent oracle: the ggml reference code from node-llama-cpp's bundled llama.cpp ------
// CTest builds tests/oracles/ggml_quants_driver.c against that source (fixture) and passes the
// binary in CROSSWORD_GGML_QUANTS_DRIVER. Run by hand: see
// tests/oracles/build_ggml_quants_driver.sh.

namespace oracle {

std::string DriverPath() {
  const char* p = std::getenv("CROSSWORD_GGML_QUANTS_DRIVER");
  return p ? p : "";
}

std::vector<std::byte> RunDriver(const std::string& mode, const std::string& type, int64_t n,
                                 const void* input, size_t input_bytes, size_t output_bytes) {
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/quant_oracle_in.bin", out = dir + "/quant_oracle_out.bin";
  {
    std::FILE* f = std::fopen(in.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    std::fwrite(input, 1, input_bytes, f);
    std::fclose(f);
  }
  const std::string cmd = "'" + DriverPath() + "' " + mode + " " + type + " " + std::to_string(n) +
                          " < '" + in + "' > '" + out + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<std::byte> result(output_bytes);
  std::FILE* f = std::fopen(out.c_str(), "rb");
  EXPECT_NE(f, nullptr);
  if (f) {
    EXPECT_EQ(std::fread(result.data(), 1, output_bytes, f), output_bytes);
    std::fclose(f);
  }
  return result;
}

// Inputs that exercise every branch: Gaussian at several scales, all zeros, constants, one big
// outlier, all-positive, sub-threshold tiny values, and mixed magnitudes.
std::vector<float> HardInputs(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t block = i / 256;
    switch (block % 8) {
      case 0:
        x[i] = g(rng);
        break;
      case 1:
        x[i] = 0.0f;
        break;
      case 2:
        x[i] = 0.75f;
        break;
      case 3:
        x[i] = (i % 256 == 77) ? 50.0f : g(rng) * 0.01f;
        break;
      case 4:
        x[i] = u(rng) * 3.0f + 0.5f;
        break;
      case 5:
        x[i] = g(rng) * 1e-17f;
        break;
      case 6:
        x[i] = g(rng) * std::exp(g(rng) * 3.0f);
        break;
      default:
        x[i] = -u(rng) * 1e4f;
        break;
    }
  }
  return x;
}

struct OracleType {
  GgmlType type;
  const char* name;
};

TEST(QuantOracle, QuantizeMatchesGgmlReferenceBitForBit) {
  if (DriverPath().empty()) GTEST_SKIP() << "CROSSWORD_GGML_QUANTS_DRIVER not set (run via ctest)";
  const OracleType types[] = {
      {GgmlType::kQ4_0, "q4_0"}, {GgmlType::kQ4_1, "q4_1"}, {GgmlType::kQ5_0, "q5_0"},
      {GgmlType::kQ5_1, "q5_1"}, {GgmlType::kQ8_0, "q8_0"}, {GgmlType::kQ8_1, "q8_1"},
      {GgmlType::kQ4_K, "q4_K"}, {GgmlType::kQ5_K, "q5_K"}, {GgmlType::kQ6_K, "q6_K"},
      {GgmlType::kQ8_K, "q8_K"},
  };
  const int64_t n = 256 * 64;
  for (uint32_t seed : {1u, 2u}) {
    auto x = HardInputs(n, seed);
    for (const auto& t : types) {
      const size_t bytes = *RowBytes(t.type, n);
      std::vector<std::byte> ours(bytes, std::byte{0});
      QuantizeRow(t.type, x.data(), ours.data(), n);
      auto theirs = RunDriver("quantize", t.name, n, x.data(), n * sizeof(float), bytes);
      const size_t block = GetTypeTraits(t.type).type_size;
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(ours[i], theirs[i])
            << t.name << " seed " << seed << ": first difference in block " << i / block << " byte "
            << i % block;
      }
    }
  }
}

TEST(QuantOracle, DequantizeMatchesGgmlReferenceBitForBit) {
  if (DriverPath().empty()) GTEST_SKIP() << "CROSSWORD_GGML_QUANTS_DRIVER not set (run via ctest)";
  const OracleType types[] = {
      {GgmlType::kQ4_0, "q4_0"}, {GgmlType::kQ4_1, "q4_1"}, {GgmlType::kQ5_0, "q5_0"},
      {GgmlType::kQ5_1, "q5_1"}, {GgmlType::kQ8_0, "q8_0"}, {GgmlType::kQ2_K, "q2_K"},
      {GgmlType::kQ3_K, "q3_K"}, {GgmlType::kQ4_K, "q4_K"}, {GgmlType::kQ5_K, "q5_K"},
      {GgmlType::kQ6_K, "q6_K"}, {GgmlType::kQ8_K, "q8_K"},
  };
  const int64_t n = 256 * 32;
  std::mt19937 rng(3);
  for (const auto& t : types) {
    const size_t bytes = *RowBytes(t.type, n);
    std::vector<std::byte> blocks(bytes);
    for (auto& b : blocks) b = static_cast<std::byte>(rng());
    // Keep the fp16/f32 scale fields finite so NaN payloads cannot differ by evaluation order.
    const size_t bs = GetTypeTraits(t.type).type_size;
    for (size_t off = 0; off < bytes; off += bs) {
      std::byte* p = blocks.data() + off;
      auto fix16 = [&](size_t at) { p[at + 1] &= std::byte{0x3b}; };  // exponent < 31
      switch (t.type) {
        case GgmlType::kQ2_K:
          fix16(80);
          fix16(82);
          break;
        case GgmlType::kQ3_K:
          fix16(108);
          break;
        case GgmlType::kQ6_K:
          fix16(208);
          break;
        case GgmlType::kQ8_K: {
          const float d = 0.01f;
          std::memcpy(p, &d, 4);
          break;
        }
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K:
          fix16(0);
          fix16(2);
          break;
        case GgmlType::kQ4_1:
        case GgmlType::kQ5_1:
          fix16(0);
          fix16(2);
          break;
        default:
          fix16(0);
          break;
      }
    }
    std::vector<float> ours(n);
    DequantizeRow(t.type, blocks.data(), ours.data(), n);
    auto theirs = RunDriver("dequantize", t.name, n, blocks.data(), bytes, n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, theirs.data() + i * 4, 4);
      ASSERT_EQ(std::bit_cast<uint32_t>(ours[i]), std::bit_cast<uint32_t>(v))
          << t.name << " element " << i << ": ours " << ours[i] << " ggml " << v;
    }
  }
}

}  // namespace oracle

}  // namespace
}  // namespace crossword
