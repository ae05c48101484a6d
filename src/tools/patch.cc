// PatchToUpstream: metadata copied with one key added, tensor infos rewritten, tensor bytes copied
// in the kernel (copy_file_range) except the small ssm_a vectors, which are recomputed.
#include "tools/patch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "core/quant.h"
#include "gguf/gguf.h"
#include "tools/clover_layout.h"

namespace crossword::tools {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// True if both paths name the same existing file (hard links and symlinks included).
bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

PatchResult PatchToUpstream(const PatchOptions& o, const Logger& log) {
  const auto start = std::chrono::steady_clock::now();
  Check(!o.input.empty() && !o.output.empty(), "gguf patch: usage: crossword gguf patch IN OUT");
  Check(o.input != o.output && !SameFile(o.input, o.output),
        "gguf patch: OUT '{}' is the input file; patch never overwrites its input, choose another "
        "name",
        o.output);
  const gguf::File in = gguf::File::Open(o.input);
  const LayoutReport layout = ExamineLayout(in);
  PatchResult result;
  result.verdict = layout.verdict;
  if (!layout.is_clover_family) {
    Fail(
        "'{}' is not a Clover GGUF file: general.architecture is '{}', expected clover_moe (or "
        "qwen35moe); nothing was written",
        o.input, layout.architecture);
  }
  if (layout.is_upstream()) {
    // Nothing to fix, but OUT is what the caller asked for (`patch IN OUT && run -m OUT`):
    // an unchanged copy, written like a patched file (temporary name, then rename).
    result.nothing_to_do = true;
    const std::string tmp = o.output + ".tmp-" + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::copy_file(o.input, tmp, std::filesystem::copy_options::overwrite_existing, ec);
    if (!ec) std::filesystem::rename(tmp, o.output, ec);
    if (ec) {
      std::filesystem::remove(tmp);
      Fail("cannot copy '{}' to '{}': {}", o.input, o.output, ec.message());
    }
    result.bytes_written = std::filesystem::file_size(o.output);
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }
  const std::string arch = layout.architecture;
  const std::string key = SharedExpertCountKey(arch);

  Fd src;
  src.fd = ::open(o.input.c_str(), O_RDONLY | O_CLOEXEC);
  if (src.fd < 0) Fail("cannot open '{}': {}", o.input, std::strerror(errno));

  const std::string tmp = o.output + ".tmp-" + std::to_string(::getpid());
  Check(DirectoryOf(tmp) == DirectoryOf(o.output),
        "internal: temporary file outside OUT's directory");
  try {
    gguf::Writer w(tmp);
    // Metadata: unchanged, plus the shared-expert key where upstream converters put it.
    const std::string anchor = arch + ".expert_shared_feed_forward_length";
    size_t last_arch_key = 0;
    bool has_anchor = false;
    for (size_t i = 0; i < in.metadata().size(); ++i) {
      const std::string_view k = in.metadata()[i].key;
      if (k.starts_with(arch + ".")) last_arch_key = i;
      if (k == anchor) has_anchor = true;
    }
    for (size_t i = 0; i < in.metadata().size(); ++i) {
      const gguf::KeyValue& kv = in.metadata()[i];
      w.AddKeyValue(std::string(kv.key), kv.value);
      const bool insert_here = has_anchor ? kv.key == anchor : i == last_arch_key;
      if (layout.missing_shared_expert_count && insert_here) {
        w.AddKeyValue(key, gguf::Value::Uint32(1));
        result.key_added = true;
      }
    }
    if (layout.missing_shared_expert_count && !result.key_added) {
      w.AddKeyValue(key, gguf::Value::Uint32(1));
      result.key_added = true;
    }
    // Tensor infos: diffusion tensors dropped, ssm_a as F32.
    std::vector<const gguf::TensorInfo*> kept;
    for (const gguf::TensorInfo& t : in.tensors()) {
      if (IsDiffusionTensor(t.name)) {
        ++result.tensors_dropped;
        continue;
      }
      kept.push_back(&t);
      const GgmlType type = IsSsmA(t.name) ? GgmlType::kF32 : t.type;
      w.AddTensor(t.name, type,
                  std::span<const int64_t>(t.ne.data(), static_cast<size_t>(t.n_dims)));
    }
    const uint64_t total = w.PlannedFileSize();
    const bool tty = o.progress;
    constexpr uint64_t kChunk = 256ull << 20;
    for (const gguf::TensorInfo* t : kept) {
      if (IsSsmA(t->name)) {
        Check(CanDequantize(t->type) && t->ne[0] % GetTypeTraits(t->type).block_size == 0,
              "'{}': tensor '{}' has type {}, which cannot be decoded to rewrite it", o.input,
              t->name, TypeName(t->type));
        std::vector<float> v(static_cast<size_t>(t->n_elements()));
        DequantizeRow(t->type, t->data, v.data(), t->n_elements());
        for (float& x : v) x = -std::exp(x);  // A = -exp(A_log), as the upstream converter does
        w.WriteTensorData(std::as_bytes(std::span<const float>(v)));
        ++result.ssm_a_rewritten;
        continue;
      }
      for (uint64_t done = 0; done < t->nbytes; done += kChunk) {
        const uint64_t n = std::min(kChunk, t->nbytes - done);
        w.CopyTensorData(src.fd, in.data_offset() + t->offset + done, n);
        if (tty) {
          std::fprintf(stderr, "\rpatch: %5.1f%%  %-40s",
                       100.0 * static_cast<double>(w.bytes_written()) / static_cast<double>(total),
                       t->name.c_str());
        }
      }
    }
    w.Finish();
    if (tty) std::fprintf(stderr, "\n");
    result.bytes_written = w.bytes_written();
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), o.output.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    Fail("cannot rename '{}' to '{}': {}", tmp, o.output, std::strerror(err));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log.Debug("patch: {} -> {}", o.input, o.output);
  return result;
}

}  // namespace crossword::tools
