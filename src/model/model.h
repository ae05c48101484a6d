// The clover_moe / qwen35moe network: load a GGUF file and run batched forward passes over
// several sequences in any of the two pass kinds (causal-commit or read-only block denoise).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/mapped_file.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/hparams.h"
#include "model/state.h"
#include "model/weights.h"

namespace crossword::model {

/// How one sequence's tokens are processed in a forward pass (docs/decoding.md).
enum class PassKind : uint8_t {
  /// Causal attention over prefix + these tokens; KV appended, GDN state advanced (commits).
  kCausal,
  /// Read-only block pass: attention sees the whole committed prefix and the whole block
  /// (bidirectional inside the block); GDN runs causally from the committed state into scratch.
  /// Nothing is committed.
  kDenoise,
};

/// Which rows of a sequence's tokens get logits.
enum class LogitRows : uint8_t { kLast, kAll, kNone };

/// One sequence's part of a batch: T tokens at positions state->n_past() + [0, T).
struct SequenceInput {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  ///< token ids (the mask id for masked diffusion slots)
  PassKind kind = PassKind::kCausal;
  LogitRows logits = LogitRows::kLast;
  /// Causal passes only: record GDN inputs so state->RollbackTo(n) can keep a prefix of them.
  bool record = false;
};

struct ContextOptions {
  int64_t max_tokens = 512;     ///< tokens per forward pass, summed over sequences
  int max_seqs = 1;             ///< sequences per forward pass
  int64_t max_logit_rows = 64;  ///< logit rows per forward pass, summed over sequences
};

class Model;

/// Scratch memory of forward passes (activations, expert routing, logits), sized once from the
/// model and ContextOptions, so a forward pass allocates nothing. One context per thread that
/// runs forward passes.
class ForwardContext {
 public:
  ForwardContext(const Model& model, const ContextOptions& options);
  const ContextOptions& options() const { return options_; }

  /// Logits of sequence `s` of the last forward pass: rows as requested (kLast: 1 row; kAll: T
  /// rows), each n_vocab floats, row i at data() + i * n_vocab.
  std::span<const float> logits(int s) const;
  int64_t n_logit_rows(int s) const { return seq_logit_count_[s]; }

 private:
  friend class Model;
  ContextOptions options_;
  std::vector<float> f_;  // one arena for every float buffer
  std::vector<int32_t> i_;
  std::vector<kernels::Activations> acts_main_, acts_ff_;  // indexed by ActFormat
  std::vector<int64_t> seq_logit_offset_, seq_logit_count_;
  int64_t n_vocab_ = 0;
  // Offsets into f_ / i_ (set up by the constructor).
  struct Layout {
    size_t x, h, cur, qkv, z, ab, conv, o, g, beta, qg, kk, vv, ao, router, topk_w, hg, hu, down,
        sh, outh, logits, gdn_scratch;
    size_t topk_ids, rows_x, rows_y, counts, offsets;
  } at_{};
  std::vector<kernels::MatMulJob> jobs_;  // capacity reserved: 2 * n_expert + 4
  int64_t gdn_scratch_floats_ = 0;
};

struct LoadOptions {
  MapOptions map;  ///< mmap by default; --no-mmap reads into RAM; --mlock pins
  Logger logger;
  /// Keep a copy of the Q8_0/Q4_0 matrices in the multi-row kernel's tile layout (RepackWeights)
  /// when it fits in a quarter of physical memory; --no-repack turns it off. Same results.
  bool repack = true;
  /// Threads for the repacking (nullptr: the loading thread alone). Not kept after Load.
  ThreadPool* pool = nullptr;
};

/// A loaded network. Immutable after Load: Forward may run concurrently on different contexts
/// and states.
class Model {
 public:
  /// Opens, validates and prepares `path`. Throws crossword::Error (file, key or tensor named).
  static std::unique_ptr<Model> Load(const std::string& path, const LoadOptions& options = {});
  /// As Load, from an already opened file (taken over).
  static std::unique_ptr<Model> FromFile(gguf::File file, const LoadOptions& options = {});

  const Hparams& hparams() const { return hp_; }
  const Weights& weights() const { return w_; }
  const gguf::File& file() const { return *file_; }
  const LayoutReport& layout() const { return w_.layout; }
  /// Activation formats the model's matrices consume (what a ForwardContext reserves).
  const std::vector<kernels::ActFormat>& activation_formats() const { return formats_; }

  /// A state sized for this model. Throws crossword::Error on bad options.
  std::unique_ptr<SequenceState> NewState(const StateOptions& options) const;

  /// Runs one forward pass over `seqs` (at most ctx.options().max_seqs of them, at most
  /// max_tokens tokens and max_logit_rows logit rows in total). Causal inputs commit their tokens
  /// to their state; denoise inputs leave it unchanged. Throws crossword::Error, before touching
  /// any state, on: a token id outside [0, n_vocab), a pass overflowing a state's n_ctx, an empty
  /// input, more tokens/rows/sequences than the context holds, record without recording room,
  /// the same state twice in one batch. Never allocates.
  void Forward(std::span<const SequenceInput> seqs, ForwardContext& ctx, ThreadPool& pool) const;

 private:
  Model() = default;
  // Rows [row0, row0 + T) of the batch buffers belong to one sequence at committed length n_past.
  struct SeqSpan {
    int64_t row0 = 0;
    int64_t T = 0;
    int64_t n_past = 0;
  };
  void EmbedTokens(std::span<const SequenceInput> seqs, ForwardContext& ctx) const;
  void GdnLayer(int il, int r, std::span<const SequenceInput> seqs, std::span<const SeqSpan> spans,
                ForwardContext& ctx, ThreadPool& pool) const;
  void AttentionLayer(int il, int a, std::span<const SequenceInput> seqs,
                      std::span<const SeqSpan> spans, ForwardContext& ctx, ThreadPool& pool) const;
  void MoeLayer(int il, int64_t T, ForwardContext& ctx, ThreadPool& pool) const;
  void Output(std::span<const SequenceInput> seqs, std::span<const SeqSpan> spans,
              ForwardContext& ctx, ThreadPool& pool) const;
  kernels::Activations& Prepare(std::vector<kernels::Activations>& acts, GgmlType type,
                                const float* x, int64_t rows, int64_t n_in, int64_t ldx,
                                ThreadPool& pool) const;

  std::unique_ptr<gguf::File> file_;
  Hparams hp_;
  Weights w_;
  Logger logger_;
  std::vector<int> layer_slot_;              // il -> index among recurrent or attention layers
  std::vector<kernels::ActFormat> formats_;  // activation formats any weight needs
};

}  // namespace crossword::model
