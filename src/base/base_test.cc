// Tests for base: fp16/bf16 conversions against the F16C instruction, errors, file mapping, the
// JSON gate, the logger, the memory limit.
#include <gtest/gtest.h>
#include <immintrin.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.h"
#include "base/fp16.h"
#include "base/json_gate.h"
#include "base/log.h"
#include "base/mapped_file.h"
#include "base/memory_limit.h"
#include "base/utf8.h"

namespace crossword {
namespace {

__attribute__((target("f16c"))) uint16_t HwF32ToF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}
__attribute__((target("f16c"))) float HwF16ToF32(uint16_t h) { return _cvtsh_ss(h); }

TEST(Fp16, AllHalfValuesRoundTripLikeF16C) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float a = F16ToF32(static_cast<uint16_t>(h));
    float b = HwF16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      ASSERT_TRUE(std::isnan(a)) << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << h;
  }
}

TEST(Fp16, FloatToHalfMatchesF16COnManyInputs) {
  std::mt19937 rng(1);
  for (int i = 0; i < 4'000'000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x807fffffu) | ((100u + (bits >> 27)) << 23);  // near half range
    float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), HwF32ToF16(f)) << std::hexfloat << f;
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.98023224e-8f, 6.1035156e-5f,
                  INFINITY, -INFINITY}) {
    ASSERT_EQ(F32ToF16(f), HwF32ToF16(f)) << f;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  // 1 + 2^-8 is a tie between 1.0 and 1 + 2^-7: goes to even (1.0).
  EXPECT_EQ(F32ToBF16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 ties to the even neighbour above.
  EXPECT_EQ(F32ToBF16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(NAN))));
}

TEST(Error, FailFormatsMessage) {
  try {
    Fail("tensor '{}' has {} dims", "blk.0.ssm_a", 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor 'blk.0.ssm_a' has 3 dims");
  }
}

TEST(MappedFile, MapsAndReads) {
  std::string path = ::testing::TempDir() + "/mapped_file_test.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "hello crossword";
  }
  for (bool mmap : {true, false}) {
    MappedFile f = MappedFile::Open(path, {.use_mmap = mmap, .lock = false});
    ASSERT_EQ(f.size(), 15u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), "hello crossword");
  }
  EXPECT_THROW(MappedFile::Open(path + ".missing"), Error);
  std::remove(path.c_str());
}

// --no-mmap reads a file into memory that cannot be reclaimed (and --mlock pins it): one that
// leaves less than an eighth of the process's memory limit is refused before any byte is read (a
// sparse file: no disk used), not OOM-killed.
TEST(MappedFile, ReadingMoreThanTheMemoryLimitIsRefused) {
  const std::string path = ::testing::TempDir() + "/mapped_file_sparse.bin";
  const size_t limit = ProcessMemoryLimit().bytes;
  ASSERT_GT(limit, 0u);
  { std::ofstream out(path, std::ios::binary); }
  // Above the limit, so that without the check the read fails (the allocation is refused)
  // rather than filling the machine; the margin itself: HoldableBytes below.
  const size_t size = limit + (size_t{1} << 30);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0);
  try {
    MappedFile::Open(path, {.use_mmap = false, .lock = false});
    ADD_FAILURE() << "read a file of " << size << " bytes under a limit of " << limit;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit the"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("without --no-mmap"), std::string::npos) << e.what();
  }
  // An eighth of the limit stays for the rest of the process: 2.5 GiB does not hold the 2.6 GB
  // 4-layer Q4_0 synth file (2,617,504,608 bytes; read there without the margin, it was killed).
  EXPECT_EQ(HoldableBytes(size_t{8} << 30), size_t{7} << 30);
  EXPECT_LT(HoldableBytes(size_t{2560} << 20), 2'617'504'608u);
  EXPECT_EQ(HoldableBytes(0), 0u);
  // Mapped, the same file opens (its pages are read only when touched).
  EXPECT_EQ(MappedFile::Open(path).size(), size);
  std::remove(path.c_str());
}

// Well-formed UTF-8 as the Unicode Standard's Table 3-7 lists it (byte ranges per position), a
// formulation independent of DecodeUtf8At's bit arithmetic. Returns the length or 0.
int Table37Length(const unsigned char* b, size_t n) {
  auto in = [](unsigned char c, int lo, int hi) { return c >= lo && c <= hi; };
  if (n >= 1 && b[0] <= 0x7F) return 1;
  if (n >= 2 && in(b[0], 0xC2, 0xDF) && in(b[1], 0x80, 0xBF)) return 2;
  if (n >= 3 && in(b[2], 0x80, 0xBF) &&
      ((b[0] == 0xE0 && in(b[1], 0xA0, 0xBF)) || (in(b[0], 0xE1, 0xEC) && in(b[1], 0x80, 0xBF)) ||
       (b[0] == 0xED && in(b[1], 0x80, 0x9F)) || (in(b[0], 0xEE, 0xEF) && in(b[1], 0x80, 0xBF)))) {
    return 3;
  }
  if (n >= 4 && in(b[2], 0x80, 0xBF) && in(b[3], 0x80, 0xBF) &&
      ((b[0] == 0xF0 && in(b[1], 0x90, 0xBF)) || (in(b[0], 0xF1, 0xF3) && in(b[1], 0x80, 0xBF)) ||
       (b[0] == 0xF4 && in(b[1], 0x80, 0x8F)))) {
    return 4;
  }
  return 0;
}

// Cgroup hierarchies mounted under a temporary folder (the mount points come from the mountinfo
// text): the limit binds from the process's cgroup up to the mount, in v2 (memory.max and
// memory.high) and v1 (memory.limit_in_bytes, and memory.stat's limit over hidden ancestors).
TEST(MemoryLimit, CgroupLimitsAreReadUpTheTree) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::path(::testing::TempDir()) / ("cgroup_tree_" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto put = [&](const fs::path& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text << "\n";
  };
  const std::string v2 = (root / "v2").string(), v1 = (root / "v1 mem").string();
  // A v2 mount of the whole hierarchy, and a v1 memory controller co-mounted with cpu at a path
  // with a space (mountinfo writes it \040); an unrelated mount and a v1 cpu-only one between.
  const std::string mountinfo =
      "22 1 8:1 / / rw,relatime - ext4 /dev/vda rw\n"
      "30 25 0:26 / " +
      v2 +
      " rw - cgroup2 cgroup2 rw,nsdelegate\n"
      "31 25 0:27 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
      "32 25 0:28 /docker/c1 " +
      (root / "v1\\040mem").string() + " rw shared:9 - cgroup cgroup rw,cpu,memory\n";
  fs::create_directories(v2);
  fs::create_directories(v1);
  // No limit files: no limit (the caller keeps physical memory).
  EXPECT_EQ(CgroupMemoryLimit("0::/pod/app\n", mountinfo), 0u);
  // v2: the process's own cgroup says "max", its parent 3 GiB (memory.max) and 2 GiB
  // (memory.high: above it the kernel throttles), the mount's root 8 GiB.
  put("v2/pod/app/memory.max", "max");
  put("v2/pod/memory.max", "3221225472");
  put("v2/pod/memory.high", "2147483648");
  put("v2/memory.max", "8589934592");
  std::string source;
  EXPECT_EQ(CgroupMemoryLimit("0::/pod/app\n", mountinfo, &source), 2147483648u);
  EXPECT_EQ(source, (root / "v2/pod/memory.high").string());
  // A path that has no folder below the mount (a container's cgroup mounted as the root): the
  // mount's own files.
  EXPECT_EQ(CgroupMemoryLimit("0::/kubepods/burstable/pod1/abc\n", mountinfo), 8589934592u);
  // A path cannot walk out of the mount.
  EXPECT_EQ(CgroupMemoryLimit("0::/../..\n", mountinfo), 8589934592u);
  // v1: the mount's root is /docker/c1, the container's own cgroup. Its limit file says "no
  // limit", the kernel's memory.stat gives the hierarchical limit of ancestors outside the mount.
  put("v1 mem/memory.limit_in_bytes", "9223372036854771712");
  put("v1 mem/memory.stat", "cache 0\nhierarchical_memory_limit 1610612736\nrss 0");
  EXPECT_EQ(CgroupMemoryLimit("4:cpu,memory:/docker/c1\n", mountinfo, &source), 1610612736u);
  EXPECT_EQ(source, (root / "v1 mem/memory.stat").string() + " hierarchical_memory_limit");
  // A child of the mount's root, with its own limit; the parent's memory.stat is not the leaf's.
  put("v1 mem/job/memory.limit_in_bytes", "1073741824");
  EXPECT_EQ(CgroupMemoryLimit("4:cpu,memory:/docker/c1/job\n", mountinfo), 1073741824u);
  put("v1 mem/job/memory.limit_in_bytes", "9223372036854771712");
  EXPECT_EQ(CgroupMemoryLimit("4:cpu,memory:/docker/c1/job\n", mountinfo), 0u);
  // Both hierarchies of a hybrid layout: the smallest limit wins.
  EXPECT_EQ(CgroupMemoryLimit("4:cpu,memory:/docker/c1\n0::/pod\n", mountinfo), 1610612736u);
  // Malformed values and lines are skipped, not errors; 0 means no limit from that file.
  put("v2/pod/memory.high", "12abc");
  put("v2/pod/memory.max", "0");
  EXPECT_EQ(CgroupMemoryLimit("0::/pod\ngarbage\n::\n", mountinfo), 8589934592u);
  EXPECT_EQ(CgroupMemoryLimit("0::/pod\n", "garbage\n1 2 3\n - - -\n"), 0u);
  fs::remove_all(root);
  // This process: never above physical memory, never unknown on Linux.
  const MemoryLimit m = ProcessMemoryLimit();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  EXPECT_GT(m.bytes, 0u);
  EXPECT_LE(m.bytes, static_cast<size_t>(pages) * static_cast<size_t>(page));
  EXPECT_EQ(m.cgroup, m.source != "physical memory");
}

TEST(Utf8, DecodeAgreesWithTable37AndRoundTrips) {
  std::mt19937 rng(7);
  auto check = [](const std::string& s) {
    char32_t cp = 0;
    const int len = DecodeUtf8At(s, 0, cp);
    const int want = Table37Length(reinterpret_cast<const unsigned char*>(s.data()), s.size());
    ASSERT_EQ(len, want) << "bytes " << std::hex
                         << static_cast<int>(static_cast<unsigned char>(s[0]));
    if (len > 0) {
      std::string back;
      AppendUtf8(cp, back);
      ASSERT_EQ(back, s.substr(0, len));
    }
  };
  // Every 1-, 2- and 3-byte string (a cut sequence included), and 4-byte ones with random tails.
  for (int a = 0; a < 256; ++a) {
    check(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) {
      check({static_cast<char>(a), static_cast<char>(b)});
      for (int c = 0x70; c < 0xD0; ++c)
        check({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
      for (int k = 0; k < 8; ++k) {
        check({static_cast<char>(a), static_cast<char>(b), static_cast<char>(0x80 + rng() % 0x40),
               static_cast<char>(rng() % 256)});
      }
    }
  }
}

TEST(JsonGate, DepthIsCountedOutsideStringsOnly) {
  const JsonLimits lim{.max_depth = 3, .max_members = 100};
  EXPECT_EQ(JsonLimitError(R"({"a": [[1]]})", lim), std::nullopt);
  EXPECT_EQ(JsonLimitError(R"("[[[[[[")", lim), std::nullopt);
  EXPECT_EQ(JsonParserMessage("[json.exception.parse_error.101] parse error at line 1"),
            "parse error at line 1");
  EXPECT_EQ(JsonParserMessage("no tag here"), "no tag here");
  EXPECT_EQ(JsonLimitError(R"({"a\"[[[[": {"b": []}})", lim), std::nullopt);  // escaped quote
  EXPECT_EQ(JsonLimitError(R"([[], [], [[]]])", lim), std::nullopt);          // siblings
  const auto e = JsonLimitError(R"({"a": [[[1]]]})", lim);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(*e, "nested deeper than 3 levels (arrays/objects) at byte 8");
}

TEST(JsonGate, HostileDepthsAreCaughtWithoutRecursion) {
  for (size_t depth : {1'000u, 40'000u, 200'000u, 5'000'000u}) {
    std::string deep(depth, '[');
    deep.append(depth, ']');
    const auto e = JsonLimitError(deep);
    ASSERT_TRUE(e.has_value()) << depth;
    EXPECT_NE(e->find("deeper than 256 levels"), std::string::npos) << *e;
  }
  std::string ok(256, '[');
  ok.append(256, ']');
  EXPECT_EQ(JsonLimitError(ok), std::nullopt);
}

TEST(JsonGate, MemberCountIsBounded) {
  const JsonLimits lim{.max_depth = 8, .max_members = 10};
  EXPECT_EQ(JsonLimitError("[1,2,3,4,5,6,7,8,9]", lim), std::nullopt);
  EXPECT_EQ(JsonLimitError(R"(["a,b,c,d,e,f,g,h,i,j,k,l"])", lim), std::nullopt);
  const auto e = JsonLimitError("[1,2,3,4,5,6,7,8,9,10,11,12]", lim);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("more than 10 array elements"), std::string::npos) << *e;
}

TEST(Logger, ControlBytesCannotForgeOrRecolourLines) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const Logger log(LogLevel::kInfo, f);
  log.Info("GET {} 404", "/v1/x\ncrossword: error: FORGED\x1b[31m\r\x7f\tend");
  std::rewind(f);
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  EXPECT_EQ(
      std::string(buf, n),
      "crossword: info: GET /v1/x\\x0acrossword: error: FORGED\\x1b[31m\\x0d\\x7f\tend 404\n");
}

}  // namespace
}  // namespace crossword
