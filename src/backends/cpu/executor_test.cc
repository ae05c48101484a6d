// CPU executor and model-loading tests on synthesized tiny models: batch/sequential agreement,
// state snapshots, denoise passes leaving no trace, replay rollback, multi-sequence batches,
// layout equivalence, the loading traps other engines fell into, and no allocation inside Forward.
#include "backends/cpu/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "backends/cpu/repack.h"
#include "backends/cpu/state.h"
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tools/synth.h"

// Heap allocations of the whole test binary so far (alloc_counter.cc replaces operator new).
int64_t AllocationCount();

namespace crossword::model {
namespace {

using backends::cpu::CpuExecutor;
using backends::cpu::CpuOptions;
using backends::cpu::CpuState;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/mt_" + name; }

std::string Synth(const std::string& name, const std::string& arch, const std::string& layout,
                  const std::string& type = "F32", uint64_t seed = 1) {
  return tools::SynthesizeOnce({.preset = "tiny",
                                .type = type,
                                .layout = layout,
                                .arch = arch,
                                .seed = seed,
                                .output = TempPath(name),
                                .threads = 2});
}

struct Runner {
  std::shared_ptr<const Model> model;
  std::unique_ptr<CpuExecutor> exec;
  std::unique_ptr<ForwardContext> ctx;

  explicit Runner(const std::string& path, int max_seqs = 2,
                  CpuOptions::RowSplit split = CpuOptions::RowSplit::kAuto, int threads = 2,
                  bool pipelined = true) {
    LoadOptions lo;
    lo.logger = Logger::Silent();
    model = Model::Load(path, lo);
    exec = std::make_unique<CpuExecutor>(model, CpuOptions{.threads = threads,
                                                           .repack = true,
                                                           .row_split = split,
                                                           .pipelined = pipelined,
                                                           .logger = Logger::Silent()});
    ContextOptions co;
    co.max_tokens = 256;
    co.max_seqs = max_seqs;
    co.max_logit_rows = 256;
    ctx = exec->NewContext(co);
  }
  std::unique_ptr<SequenceState> State(int64_t n_ctx = 512, int64_t record = 32) {
    StateOptions so;
    so.n_ctx = n_ctx;
    so.max_record_tokens = record;
    return exec->NewState(so);
  }
  // Logits of every token (kAll) or of the last one.
  std::vector<float> Run(SequenceState& st, std::span<const int32_t> toks,
                         PassKind kind = PassKind::kCausal, LogitRows rows = LogitRows::kAll,
                         bool record = false) {
    SequenceInput in{&st, toks, kind, rows, record};
    exec->Forward({&in, 1}, *ctx);
    auto l = ctx->logits(0);
    return {l.begin(), l.end()};
  }
  int64_t n_vocab() const { return model->hparams().n_vocab; }
};

std::vector<int32_t> RandomTokens(int n, int seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

float MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

std::vector<float> GdnBytes(SequenceState& state, const Hparams& hp) {
  CpuState& st = dynamic_cast<CpuState&>(state);
  std::vector<float> v;
  for (int r = 0; r < hp.n_recurrent(); ++r) {
    v.insert(v.end(), st.conv_state(r), st.conv_state(r) + st.conv_floats());
    v.insert(v.end(), st.ssm_state(r), st.ssm_state(r) + st.ssm_floats());
  }
  return v;
}

// The tile copies' allowance (issue 18): a quarter of memory for small files; for a full-size
// file the mapped weights and a free quarter come first, so the 19.7 GB 40-layer Q4_0 Clover on
// this project's 24 GiB machine gets none, and a mid-size file what is left.
TEST(RepackAllowance, LeavesTheFileAndAQuarterResident) {
  constexpr size_t kGiB = size_t{1} << 30;
  EXPECT_EQ(backends::cpu::RepackAllowance(24 * kGiB, 2 * kGiB), 6 * kGiB);  // the 4-layer file
  EXPECT_EQ(backends::cpu::RepackAllowance(24 * kGiB, 19'723'332'448),
            0u);  // the 40-layer Q4_0 file
  EXPECT_EQ(backends::cpu::RepackAllowance(24 * kGiB, 14 * kGiB), 4 * kGiB);
  EXPECT_EQ(backends::cpu::RepackAllowance(128 * kGiB, 20 * kGiB), 32 * kGiB);
  EXPECT_EQ(backends::cpu::RepackAllowance(0, 0), 0u);
  // The cap on all copies: the limit less a quarter, none when the file would not leave an eighth
  // of the limit (its pages then need every byte the copies would pin).
  EXPECT_EQ(backends::cpu::RepackCap(24 * kGiB, 19'723'332'448), 18 * kGiB);
  EXPECT_EQ(backends::cpu::RepackCap(2 * kGiB, 2'617'504'608), 0u);  // the 4-layer file, 2 GiB
  EXPECT_EQ(backends::cpu::RepackCap(4 * kGiB, 2'617'504'608), 3 * kGiB);
  EXPECT_EQ(backends::cpu::RepackCap(2816u << 20, 2'617'504'608), 0u);  // below the limit, but
                                                                        // within its last eighth
}

TEST(CpuExecutor, LoadsBothLayoutsWithTheSameLogits) {
  Runner up(Synth("up.gguf", "qwen35moe", "upstream"));
  Runner off(Synth("off.gguf", "clover_moe", "official"));
  EXPECT_FALSE(up.model->layout().official());
  EXPECT_TRUE(off.model->layout().official());
  EXPECT_TRUE(off.model->layout().ssm_a_raw);
  EXPECT_TRUE(off.model->layout().shared_count_missing);
  EXPECT_EQ(off.model->layout().n_diffusion_tensors, 4 * off.model->hparams().n_recurrent());
  const auto toks = RandomTokens(20, 1, 1500);
  auto s1 = up.State();
  auto s2 = off.State();
  EXPECT_EQ(MaxAbsDiff(up.Run(*s1, toks), off.Run(*s2, toks)), 0.0f);
}

TEST(CpuExecutor, NormWeightsAreUsedAsStored) {
  // The +1 of Qwen3.5's zero-centred RMSNorm is already in the file: loading must not add it.
  const std::string path = Synth("up.gguf", "qwen35moe", "upstream");
  gguf::File f = gguf::File::Open(path);
  Runner r(path);
  const gguf::TensorInfo* t = f.FindTensor("blk.0.attn_norm.weight");
  ASSERT_NE(t, nullptr);
  const float* file_w = reinterpret_cast<const float*>(t->data);
  const auto& w = r.model->weights().layers[0].attn_norm;
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w[i], file_w[i]);
}

TEST(CpuExecutor, PrefillMatchesTokenByToken) {
  Runner r(Synth("up.gguf", "qwen35moe", "upstream"));
  for (int n : {40, 100}) {  // 100 >= 64 takes the chunked GDN form in the batched pass
    const auto toks = RandomTokens(n, n, 1500);
    auto a = r.State();
    auto b = r.State();
    const auto batched = r.Run(*a, toks);
    std::vector<float> seq;
    for (int i = 0; i < n; ++i) {
      auto row = r.Run(*b, std::span(toks).subspan(i, 1), PassKind::kCausal, LogitRows::kLast);
      seq.insert(seq.end(), row.begin(), row.end());
    }
    EXPECT_LT(MaxAbsDiff(batched, seq), n < 64 ? 2e-4f : 2e-3f) << "prompt of " << n;
  }
}

TEST(CpuExecutor, SnapshotRunRestoreIsBitIdentical) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  const auto prompt = RandomTokens(30, 2, 1500);
  const auto cont = RandomTokens(10, 3, 1500);
  auto st = r.State();
  r.Run(*st, prompt, PassKind::kCausal, LogitRows::kLast);
  StateSnapshot snap;
  st->SaveSnapshot(snap);
  const auto first = r.Run(*st, cont);
  EXPECT_EQ(st->n_past(), 40);
  ASSERT_TRUE(st->CanRestore(snap));
  st->Restore(snap);
  EXPECT_EQ(st->n_past(), 30);
  const auto second = r.Run(*st, cont);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
  // A snapshot taken after rows that were since rewritten cannot be restored.
  StateSnapshot late;
  st->SaveSnapshot(late);                // at 40
  st->Restore(snap);                     // back to 30
  r.Run(*st, RandomTokens(5, 9, 1500));  // rewrites rows 30..34
  EXPECT_FALSE(st->CanRestore(late));
  EXPECT_THROW(st->Restore(late), Error);
  EXPECT_TRUE(st->CanRestore(snap));
}

TEST(CpuExecutor, DenoisePassLeavesNoTrace) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  const Hparams& hp = r.model->hparams();
  const auto prompt = RandomTokens(25, 4, 1500);
  auto a = r.State();
  auto b = r.State();
  r.Run(*a, prompt);
  r.Run(*b, prompt);
  const auto before = GdnBytes(*a, hp);
  std::vector<int32_t> block = RandomTokens(8, 5, 1500);
  block[3] = block[5] = 1626;  // mask-like ids
  const auto denoise = r.Run(*a, block, PassKind::kDenoise);
  EXPECT_EQ(a->n_past(), 25);
  EXPECT_EQ(GdnBytes(*a, hp), before);
  // The denoised rows really are bidirectional: the first row sees later block tokens.
  const auto causal_first =
      r.Run(*b, std::span(block).first(1), PassKind::kCausal, LogitRows::kLast);
  EXPECT_GT(MaxAbsDiff(std::span(denoise).first(r.n_vocab()), causal_first), 1e-4f);
  // A commit after the denoise pass equals a commit without it.
  auto c = r.State();
  r.Run(*c, prompt);
  const auto x = r.Run(*a, block);
  const auto y = r.Run(*c, block);
  EXPECT_EQ(MaxAbsDiff(x, y), 0.0f);
}

TEST(CpuExecutor, NeedRowsComputeOnlyThoseRowsWithTheSameBits) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  const Hparams& hp = r.model->hparams();
  const int64_t V = r.n_vocab();
  const auto prompt = RandomTokens(21, 30, 1500);
  auto st = r.State();
  r.Run(*st, prompt);
  std::vector<int32_t> block = RandomTokens(10, 31, 1500);
  block[4] = block[7] = 1626;
  const auto all = r.Run(*st, block, PassKind::kDenoise);
  EXPECT_EQ(r.ctx->head_rows(), 10);
  // Every MoE layer counts its distinct experts: at least top-k, at most all of them.
  EXPECT_EQ(r.ctx->moe_layers(), hp.n_layer);
  EXPECT_GE(r.ctx->experts_used(), int64_t{hp.n_expert_used} * hp.n_layer);
  EXPECT_LE(r.ctx->experts_used(), int64_t{hp.n_expert} * hp.n_layer);
  const uint8_t need[10] = {0, 1, 1, 0, 0, 0, 1, 0, 0, 1};
  SequenceInput in{st.get(), block, PassKind::kDenoise, LogitRows::kAll};
  in.need_rows = need;
  r.exec->Forward({&in, 1}, *r.ctx);
  EXPECT_EQ(r.ctx->head_rows(), 4);
  const auto some = r.ctx->logits(0);
  ASSERT_EQ(some.size(), all.size());
  for (int64_t i = 0; i < 10; ++i) {
    if (!need[i]) continue;
    for (int64_t v = 0; v < V; ++v) ASSERT_EQ(some[i * V + v], all[i * V + v]) << i;
  }
  // A single row: the AR step's one-row product gives the same bits as in the batch.
  const uint8_t one[10] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
  in.need_rows = one;
  r.exec->Forward({&in, 1}, *r.ctx);
  EXPECT_EQ(r.ctx->head_rows(), 1);
  for (int64_t v = 0; v < V; ++v) ASSERT_EQ(r.ctx->logits(0)[8 * V + v], all[8 * V + v]);
  // need_rows needs kAll and one flag per token.
  in.need_rows = std::span(need).first(9);
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
  in.need_rows = need;
  in.logits = LogitRows::kLast;
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
}

// An observer that wants nothing: a pass with it computes the last layer for every row (the
// executor keeps whole tensors for observers), the reference for KeepOutputRows below.
class NoTensors final : public ForwardObserver {
 public:
  bool Wants(std::string_view, int) const override { return false; }
  void OnTensor(const TensorView&) override {}
};

// The last layer runs only on rows whose output is read (CpuExecutor::KeepOutputRows). In one
// batch, on both row splits: a kLast pass, a denoise pass with scattered need_rows, a fused
// commit + denoise pass, and a chunked verify (every row kept, for MoreLogits) give the bits of the
// same batch with every row computed; the states after them too (the next pass's logits); a kNone
// prefill leaves the state a kAll one does; and the kLast pass reads fewer experts.
TEST(CpuExecutor, TheLastLayerRunsOnlyOnRowsWhoseOutputIsRead) {
  for (const auto split : {CpuOptions::RowSplit::kRows, CpuOptions::RowSplit::kColumns}) {
    Runner r(Synth("off.gguf", "clover_moe", "official"), 4, split);
    const Hparams& hp = r.model->hparams();
    const int64_t V = r.n_vocab();
    const auto prompt = RandomTokens(19, 50, 1500);
    const auto block = RandomTokens(40, 51, 1500);
    std::vector<int32_t> fused(block.begin(), block.begin() + 20);
    fused.push_back(block[20]);
    fused.resize(32, block[39]);  // the tail's masks (any token: the bits are what is compared)
    uint8_t scattered[40] = {}, tail[32] = {}, first5[40] = {};
    for (int i = 0; i < 40; ++i) scattered[i] = (i * 7) % 5 == 1;
    for (int i = 19; i < 32; ++i) tail[i] = 1;
    for (int i = 0; i < 5; ++i) first5[i] = 1;
    std::vector<std::vector<float>> got[2];
    std::vector<float> next[2];
    int64_t experts_last[2] = {};
    for (int full = 0; full < 2; ++full) {
      NoTensors none;
      ForwardObserver* observer = full ? &none : nullptr;
      std::unique_ptr<SequenceState> st[4];
      for (auto& s : st) {
        s = r.State();
        r.Run(*s, prompt);
      }
      SequenceInput ins[4] = {{st[0].get(), block, PassKind::kCausal, LogitRows::kLast},
                              {st[1].get(), block, PassKind::kDenoise, LogitRows::kAll},
                              {st[2].get(), fused, PassKind::kCausal, LogitRows::kAll},
                              {st[3].get(), block, PassKind::kCausal, LogitRows::kAll}};
      ins[1].need_rows = scattered;
      ins[2].need_rows = tail;
      ins[2].denoise_tail = 12;
      ins[3].need_rows = first5;
      r.exec->Forward(ins, *r.ctx, observer);
      r.exec->MoreLogits(*r.ctx, 3, 5, 40);
      // Not for a denoise pass or a fused one: their skipped rows have no final hidden state.
      EXPECT_THROW(r.exec->MoreLogits(*r.ctx, 1, 0, 1), Error);
      EXPECT_THROW(r.exec->MoreLogits(*r.ctx, 2, 0, 1), Error);
      for (int s = 0; s < 4; ++s) {
        const auto l = r.ctx->logits(s);
        got[full].emplace_back(l.begin(), l.end());
      }
      // The states the batch left: one AR step of each sequence.
      for (auto& s : st) {
        const auto l = r.Run(*s, std::span(block).first(1), PassKind::kCausal, LogitRows::kLast);
        next[full].insert(next[full].end(), l.begin(), l.end());
      }
      auto alone = r.State();
      r.Run(*alone, prompt);
      SequenceInput last{alone.get(), block, PassKind::kCausal, LogitRows::kLast};
      r.exec->Forward({&last, 1}, *r.ctx, observer);
      experts_last[full] = r.ctx->experts_used();
    }
    const uint8_t* need[4] = {nullptr, scattered, tail, nullptr};
    for (int s = 0; s < 4; ++s) {
      ASSERT_EQ(got[0][s].size(), got[1][s].size()) << s;
      const int64_t rows = static_cast<int64_t>(got[0][s].size()) / V;
      for (int64_t i = 0; i < rows; ++i) {
        if (need[s] && !need[s][i]) continue;
        for (int64_t v = 0; v < V; ++v)
          ASSERT_EQ(got[0][s][i * V + v], got[1][s][i * V + v]) << "seq " << s << " row " << i;
      }
    }
    ASSERT_EQ(next[0], next[1]);
    // 40 rows of a random router select more experts in the last layer than one row does.
    EXPECT_LT(experts_last[0], experts_last[1]);
    EXPECT_GE(experts_last[0], experts_last[1] - (hp.n_expert - hp.n_expert_used));
    // A prefill chunk without logits (kNone: no row kept) leaves the state a kAll pass does.
    auto a = r.State(), b = r.State();
    r.Run(*a, prompt, PassKind::kCausal, LogitRows::kNone);
    r.Run(*b, prompt, PassKind::kCausal, LogitRows::kAll);
    EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    EXPECT_EQ(r.Run(*a, block, PassKind::kCausal, LogitRows::kAll),
              r.Run(*b, block, PassKind::kCausal, LogitRows::kAll));
  }
}

// MoreLogits (a chunked verify pass): rows a causal pass skipped through need_rows, computed after
// it, get the bits the pass would have given them, for either sequence of a batch; the state is
// not touched; bad calls throw.
TEST(CpuExecutor, MoreLogitsComputeSkippedRowsWithTheSameBits) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  const int64_t V = r.n_vocab();
  const auto prompt = RandomTokens(17, 40, 1500);
  const auto block = RandomTokens(10, 41, 1500);
  auto full = r.State(), a = r.State(), b = r.State();
  r.Run(*full, prompt);
  r.Run(*a, prompt);
  r.Run(*b, prompt);
  const auto want = r.Run(*full, block, PassKind::kCausal, LogitRows::kAll, /*record=*/true);
  const uint8_t first3[10] = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0};
  SequenceInput ins[2] = {{a.get(), block, PassKind::kCausal, LogitRows::kAll, true},
                          {b.get(), block, PassKind::kCausal, LogitRows::kAll, true}};
  ins[0].need_rows = first3;
  ins[1].need_rows = first3;
  r.exec->Forward(ins, *r.ctx);
  EXPECT_EQ(r.ctx->head_rows(), 6);
  const int64_t n_past = a->n_past();
  EXPECT_TRUE(r.exec->computes_more_logits());
  r.exec->MoreLogits(*r.ctx, 1, 3, 6);  // the second sequence first, in two chunks
  r.exec->MoreLogits(*r.ctx, 1, 6, 10);
  r.exec->MoreLogits(*r.ctx, 0, 3, 10);
  EXPECT_EQ(r.ctx->head_rows(), 20);
  EXPECT_EQ(a->n_past(), n_past);
  for (int s = 0; s < 2; ++s) {
    const auto got = r.ctx->logits(s);
    ASSERT_EQ(got.size(), want.size());
    for (int64_t i = 0; i < 10 * V; ++i) ASSERT_EQ(got[i], want[i]) << "seq " << s << " at " << i;
  }
  EXPECT_THROW(r.exec->MoreLogits(*r.ctx, 0, 5, 11), Error);  // past the pass's rows
  EXPECT_THROW(r.exec->MoreLogits(*r.ctx, 0, 4, 4), Error);   // empty
  EXPECT_THROW(r.exec->MoreLogits(*r.ctx, 2, 0, 1), Error);   // no such sequence
  r.Run(*a, std::span(block).first(1), PassKind::kCausal, LogitRows::kLast);
  EXPECT_THROW(r.exec->MoreLogits(*r.ctx, 0, 0, 1), Error);  // a kLast pass
}

TEST(CpuExecutor, ExpertAnchorRowsKeepMaskRowsInsideTheAnchorsExperts) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  const Hparams& hp = r.model->hparams();
  auto st = r.State();
  r.Run(*st, RandomTokens(15, 40, 1500));
  std::vector<int32_t> block(12, 1626);
  block[0] = 77;
  SequenceInput in{st.get(), block, PassKind::kDenoise, LogitRows::kAll};
  r.exec->Forward({&in, 1}, *r.ctx);
  const int64_t free_union = r.ctx->experts_used();
  const auto free_logits = std::vector<float>(r.ctx->logits(0).begin(), r.ctx->logits(0).end());
  in.expert_anchor_rows = 1;  // one anchor row: k experts per layer in the whole pass
  r.exec->Forward({&in, 1}, *r.ctx);
  EXPECT_EQ(r.ctx->experts_used(), int64_t{hp.n_expert_used} * hp.n_layer);
  EXPECT_GT(free_union, r.ctx->experts_used());
  EXPECT_GT(MaxAbsDiff(free_logits, r.ctx->logits(0)), 0.0f);
  EXPECT_EQ(st->n_past(), 15);
  in.expert_anchor_rows = 12;  // every row an anchor: the free routing
  r.exec->Forward({&in, 1}, *r.ctx);
  EXPECT_EQ(MaxAbsDiff(free_logits, r.ctx->logits(0)), 0.0f);
  in.kind = PassKind::kCausal;  // a committing pass must route exactly
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
  in.kind = PassKind::kDenoise;
  in.expert_anchor_rows = -1;
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
}

TEST(CpuExecutor, RollbackEqualsForwardingTheAcceptedPrefix) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  const Hparams& hp = r.model->hparams();
  const auto prompt = RandomTokens(20, 6, 1500);
  const auto block = RandomTokens(12, 7, 1500);
  for (int keep : {0, 1, 5, 11, 12}) {
    auto a = r.State();
    auto b = r.State();
    r.Run(*a, prompt);
    r.Run(*b, prompt);
    r.Run(*a, block, PassKind::kCausal, LogitRows::kAll, /*record=*/true);
    a->RollbackTo(keep);
    if (keep > 0) r.Run(*b, std::span(block).first(keep));
    EXPECT_EQ(a->n_past(), b->n_past());
    const auto ga = GdnBytes(*a, hp), gb = GdnBytes(*b, hp);
    EXPECT_LT(MaxAbsDiff(ga, gb), 1e-5f) << "keep " << keep;
    const auto next = RandomTokens(3, 8, 1500);
    EXPECT_LT(MaxAbsDiff(r.Run(*a, next), r.Run(*b, next)), 1e-4f) << "keep " << keep;
  }
}

// A fused pass (denoise_tail) gives, bit for bit, the causal pass of its first tokens followed by
// the denoise pass of its tail, and commits (and records) only the causal tokens: F32 tiles and
// the int8 path of Q4_0 alike, with a second sequence in the batch.
TEST(CpuExecutor, FusedPassEqualsCommitThenDenoiseBitForBit) {
  for (const std::string type : {"F32", "Q4_0"}) {
    SCOPED_TRACE(type);
    Runner r(Synth("fuse_" + type + ".gguf", "clover_moe", "official", type));
    const Hparams& hp = r.model->hparams();
    const int64_t V = r.n_vocab();
    const auto prompt = RandomTokens(20, 50, 1500);
    const auto block = RandomTokens(9, 51, 1500);
    std::vector<int32_t> tail(7, 1626);
    tail[0] = 123;
    auto a = r.State(), b = r.State(), other = r.State();
    r.Run(*a, prompt);
    r.Run(*b, prompt);
    r.Run(*other, prompt);
    const auto commit = r.Run(*a, block, PassKind::kCausal, LogitRows::kAll, /*record=*/true);
    const auto denoise = r.Run(*a, tail, PassKind::kDenoise);
    std::vector<int32_t> fused = block;
    fused.insert(fused.end(), tail.begin(), tail.end());
    const auto more = RandomTokens(4, 52, 1500);
    SequenceInput ins[2] = {{b.get(), fused, PassKind::kCausal, LogitRows::kAll, true},
                            {other.get(), more, PassKind::kCausal, LogitRows::kLast}};
    ins[0].denoise_tail = 7;
    r.exec->Forward(ins, *r.ctx);
    const auto got = r.ctx->logits(0);
    ASSERT_EQ(got.size(), static_cast<size_t>(16 * V));
    EXPECT_EQ(std::memcmp(got.data(), commit.data(), commit.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(got.data() + 9 * V, denoise.data(), denoise.size() * sizeof(float)), 0);
    EXPECT_EQ(b->n_past(), 29);
    EXPECT_EQ(b->recorded_tokens(), 9);
    EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    // The recording holds the causal tokens only: rolling back cuts the same prefix.
    a->RollbackTo(4);
    b->RollbackTo(4);
    EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    const auto next = RandomTokens(3, 53, 1500);
    const auto na = r.Run(*a, next), nb = r.Run(*b, next);
    EXPECT_EQ(std::memcmp(na.data(), nb.data(), na.size() * sizeof(float)), 0);
  }
  // The tail needs a causal pass with at least one causal token, and recording room for those.
  Runner r(Synth("fuse_F32.gguf", "clover_moe", "official", "F32"));
  auto st = r.State(512, 4);
  const auto toks = RandomTokens(8, 54, 1500);
  SequenceInput in{st.get(), toks, PassKind::kCausal, LogitRows::kAll, true};
  in.denoise_tail = 4;
  r.exec->Forward({&in, 1}, *r.ctx);  // 4 recorded tokens fit
  EXPECT_EQ(st->n_past(), 4);
  in.denoise_tail = 3;  // 5 recorded tokens do not
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
  in.denoise_tail = 8;
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
  in.denoise_tail = 4;
  in.kind = PassKind::kDenoise;
  in.record = false;
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
  EXPECT_EQ(st->n_past(), 4);
}

// Row-split passes (CpuOptions::RowSplit): the two threads each run a block of rows through a
// layer's row-independent work. Every pass kind gives the bits, states and distinct-expert counts
// of the column-split pass (the kernels are batch-invariant), on every weight path.
TEST(CpuExecutor, RowSplitPassesGiveTheColumnSplitBits) {
  for (const std::string type : {"F32", "BF16", "Q8_0", "Q4_0", "Q4_K_M"}) {
    SCOPED_TRACE(type);
    const std::string path = Synth("fuse_" + type + ".gguf", "clover_moe", "official", type);
    Runner rows(path, 2, CpuOptions::RowSplit::kRows);
    Runner cols(path, 2, CpuOptions::RowSplit::kColumns);
    ASSERT_EQ(rows.exec->row_parts(), 2);
    ASSERT_EQ(cols.exec->row_parts(), 1);
    // kAuto: the tiny preset's layers take ~8 MiB in F32 (over kRowSplitMaxLayerBytes), ~1 MiB in
    // Q4_0.
    if (type == "F32" || type == "Q4_0") {
      EXPECT_EQ(Runner(path).exec->row_parts(), type == "F32" ? 1 : 2);
    }
    const Hparams& hp = rows.model->hparams();
    auto same_pass = [&](const char* what) {
      SCOPED_TRACE(what);
      const auto x = rows.ctx->logits(0), y = cols.ctx->logits(0);
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
      EXPECT_EQ(rows.ctx->experts_used(), cols.ctx->experts_used());
    };
    // Passes of one sequence run as pipelined row blocks of equal rows (PipelinedRowBlocks*
    // below); passes of two divide their rows differently: evenly, then 3/4 and 1/4 to the first
    // block.
    auto& rows_ctx = static_cast<backends::cpu::CpuContext&>(*rows.ctx);
    int pass = 0;
    auto both = [&](std::span<SequenceInput> a, std::span<SequenceInput> b, const char* what) {
      if (pass > 0) {
        rows_ctx.set_row_block_cost(0, pass % 2 ? 1.0 : 3.0);
        rows_ctx.set_row_block_cost(1, pass % 2 ? 3.0 : 1.0);
      }
      ++pass;
      rows.exec->Forward(a, *rows.ctx);
      cols.exec->Forward(b, *cols.ctx);
      same_pass(what);
    };
    auto a = rows.State(), b = cols.State(), a2 = rows.State(), b2 = cols.State();
    const auto prompt = RandomTokens(41, 60, 1500);  // blocks of 20 and 21 rows
    SequenceInput pa{a.get(), prompt}, pb{b.get(), prompt};
    both({&pa, 1}, {&pb, 1}, "prompt");
    // A recorded 17-row verify (blocks of 8 and 9 rows), rolled back to 15 tokens: the replay
    // reads rows of the second block, among them its first K-1 conv rows, which the second block
    // computes from the first block's rows; a 32-row denoise block.
    const auto block = RandomTokens(17, 61, 1500);
    SequenceInput va{a.get(), block, PassKind::kCausal, LogitRows::kAll, true};
    SequenceInput vb{b.get(), block, PassKind::kCausal, LogitRows::kAll, true};
    both({&va, 1}, {&vb, 1}, "verify");
    a->RollbackTo(15);
    b->RollbackTo(15);
    EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    std::vector<int32_t> masks(32, 1626);
    masks[0] = 99;
    SequenceInput da{a.get(), masks, PassKind::kDenoise, LogitRows::kAll};
    SequenceInput db{b.get(), masks, PassKind::kDenoise, LogitRows::kAll};
    both({&da, 1}, {&db, 1}, "denoise");
    // A fused 16 + 16 pass beside a second sequence's 3-token step (blocks cut across both).
    std::vector<int32_t> fused = RandomTokens(16, 62, 1500);
    fused.insert(fused.end(), masks.begin(), masks.begin() + 16);
    const auto step = RandomTokens(3, 63, 1500);
    SequenceInput fa[2] = {{a.get(), fused, PassKind::kCausal, LogitRows::kAll, true},
                           {a2.get(), step, PassKind::kCausal, LogitRows::kLast}};
    SequenceInput fb[2] = {{b.get(), fused, PassKind::kCausal, LogitRows::kAll, true},
                           {b2.get(), step, PassKind::kCausal, LogitRows::kLast}};
    fa[0].denoise_tail = fb[0].denoise_tail = 16;
    both(fa, fb, "fused");
    EXPECT_EQ(std::memcmp(rows.ctx->logits(1).data(), cols.ctx->logits(1).data(),
                          rows.ctx->logits(1).size() * sizeof(float)),
              0);
    EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    EXPECT_EQ(GdnBytes(*a2, hp), GdnBytes(*b2, hp));
    const auto next = RandomTokens(20, 64, 1500);
    SequenceInput na{a.get(), next}, nb{b.get(), next};
    both({&na, 1}, {&nb, 1}, "after the fused pass");
    // Prompts of 15 and 17 rows, split evenly: the second block starts at the second prompt's
    // row 1, so its first rows' conv windows mix that sequence's conv state with the other
    // block's row (the rows GdnCore computes after the blocks).
    auto a3 = rows.State(), b3 = cols.State();
    const auto p15 = RandomTokens(15, 65, 1500), p17 = RandomTokens(17, 66, 1500);
    SequenceInput ma[2] = {{a3.get(), p15, PassKind::kCausal, LogitRows::kLast},
                           {a2.get(), p17, PassKind::kCausal, LogitRows::kAll}};
    SequenceInput mb[2] = {{b3.get(), p15, PassKind::kCausal, LogitRows::kLast},
                           {b2.get(), p17, PassKind::kCausal, LogitRows::kAll}};
    rows_ctx.set_row_block_cost(0, 1.0);
    rows_ctx.set_row_block_cost(1, 1.0);
    rows.exec->Forward(ma, *rows.ctx);
    cols.exec->Forward(mb, *cols.ctx);
    same_pass("two prompts, a block boundary at the second one's row 1");
    EXPECT_EQ(std::memcmp(rows.ctx->logits(1).data(), cols.ctx->logits(1).data(),
                          rows.ctx->logits(1).size() * sizeof(float)),
              0);
    EXPECT_EQ(GdnBytes(*a2, hp), GdnBytes(*b2, hp));
    EXPECT_EQ(GdnBytes(*a3, hp), GdnBytes(*b3, hp));
  }
}

// Pipelined row blocks (one sequence; 2 and 3 threads) against the same passes phase by phase:
// the same logits, expert counts and GDN states after causal passes (blocks of 4 rows and up,
// uneven cuts), a recorded verify rolled back into its second block, and denoise passes (the
// scratch state handed from block to block; bidirectional attention waits for every block's K/V
// rows), and a causal pass that reads what they all left.
TEST(CpuExecutor, PipelinedRowBlocksGiveThePhaseBits) {
  const std::string path = Synth("fuse_Q4_0.gguf", "clover_moe", "official", "Q4_0");
  for (int threads : {2, 3}) {
    SCOPED_TRACE(threads);
    Runner pipe(path, 2, CpuOptions::RowSplit::kRows, threads, true);
    Runner phase(path, 2, CpuOptions::RowSplit::kRows, threads, false);
    const Hparams& hp = pipe.model->hparams();
    auto a = pipe.State(), b = phase.State();
    auto same = [&](std::span<const int32_t> toks, PassKind kind, bool record, const char* what) {
      SCOPED_TRACE(what);
      const auto x = pipe.Run(*a, toks, kind, LogitRows::kAll, record);
      const auto y = phase.Run(*b, toks, kind, LogitRows::kAll, record);
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
      EXPECT_EQ(pipe.ctx->experts_used(), phase.ctx->experts_used());
      EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    };
    same(RandomTokens(8, 81, 1500), PassKind::kCausal, false, "8 rows: two blocks of 4");
    same(RandomTokens(13, 82, 1500), PassKind::kCausal, false, "13 rows");
    same(RandomTokens(17, 83, 1500), PassKind::kCausal, true, "recorded verify of 17 rows");
    a->RollbackTo(12);
    b->RollbackTo(12);
    EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    std::vector<int32_t> masks(32, 1626);
    masks[0] = 99;
    same(masks, PassKind::kDenoise, false, "denoise 32");
    same(std::span<const int32_t>(masks).first(9), PassKind::kDenoise, false, "denoise 9");
    same(RandomTokens(32, 84, 1500), PassKind::kCausal, false, "after the denoise passes");

    // Each block runs the last layer's Out part and the head on its own kept rows
    // (PlanBlockTails): passes whose head rows are a few, in one block or none.
    auto same_rows = [&](std::span<const int32_t> toks, PassKind kind, LogitRows rows,
                         std::span<const uint8_t> need, bool record, const char* what) {
      SCOPED_TRACE(what);
      SequenceInput ia{a.get(), toks, kind, rows, record}, ib{b.get(), toks, kind, rows, record};
      ia.need_rows = ib.need_rows = need;
      pipe.exec->Forward({&ia, 1}, *pipe.ctx);
      phase.exec->Forward({&ib, 1}, *phase.ctx);
      const auto x = pipe.ctx->logits(0), y = phase.ctx->logits(0);
      ASSERT_EQ(x.size(), y.size());
      const int64_t V = pipe.n_vocab(), T = static_cast<int64_t>(toks.size());
      const int64_t first = rows == LogitRows::kLast ? T - 1 : 0;
      for (int64_t i = 0; i < static_cast<int64_t>(x.size()) / V; ++i) {
        if (!need.empty() && !need[static_cast<size_t>(first + i)]) continue;  // not computed
        EXPECT_EQ(std::memcmp(x.data() + i * V, y.data() + i * V, V * sizeof(float)), 0) << i;
      }
      const PassCounters &c = pipe.ctx->counters(), &d = phase.ctx->counters();
      EXPECT_EQ(c.experts_used, d.experts_used);
      EXPECT_EQ(c.moe_layers, d.moe_layers);
      EXPECT_EQ(c.head_rows, d.head_rows);
      EXPECT_EQ(c.last_layer_rows, d.last_layer_rows);
      EXPECT_EQ(GdnBytes(*a, hp), GdnBytes(*b, hp));
    };
    std::vector<uint8_t> need(32, 0);
    for (int j : {3, 4, 9, 30}) need[static_cast<size_t>(j)] = 1;
    same_rows(masks, PassKind::kDenoise, LogitRows::kAll, need, false,
              "denoise 32, 4 head rows (both blocks)");
    std::fill(need.begin(), need.end(), 0);
    need[27] = 1;
    same_rows(masks, PassKind::kDenoise, LogitRows::kAll, need, false,
              "denoise 32, one head row (the first block keeps none)");
    std::fill(need.begin(), need.end(), 0);
    same_rows(masks, PassKind::kDenoise, LogitRows::kAll, need, false, "denoise 32, no head row");
    same_rows(RandomTokens(12, 85, 1500), PassKind::kCausal, LogitRows::kLast, {}, false,
              "12 rows, the last one's logits");
    same_rows(RandomTokens(12, 86, 1500), PassKind::kCausal, LogitRows::kNone, {}, false,
              "a prefill chunk of 12 rows: no logits");
    // A verify in chunks: the first 5 rows' logits, then the rest from the kept rows
    // (MoreLogits reads every row's final residual).
    const auto verify = RandomTokens(16, 87, 1500);
    std::fill(need.begin(), need.end(), 0);
    std::fill_n(need.begin(), 5, 1);
    same_rows(verify, PassKind::kCausal, LogitRows::kAll, std::span(need).first(16), true,
              "a verify of 16 rows, its first 5 logit rows");
    pipe.exec->MoreLogits(*pipe.ctx, 0, 5, 16);
    phase.exec->MoreLogits(*phase.ctx, 0, 5, 16);
    const auto x = pipe.ctx->logits(0), y = phase.ctx->logits(0);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
    same(RandomTokens(8, 88, 1500), PassKind::kCausal, false, "after them");
  }
}

// Three threads: up to three blocks, split evenly (48 rows: 16 each; 41: 13, 14, 14; 24 and 17
// rows: two blocks), each a causal pass from an empty state, bit for bit the column split.
TEST(CpuExecutor, RowSplitWithThreeBlocksGivesTheColumnSplitBits) {
  const std::string path = Synth("fuse_Q4_0.gguf", "clover_moe", "official", "Q4_0");
  Runner rows(path, 2, CpuOptions::RowSplit::kRows, 3);
  Runner cols(path, 2, CpuOptions::RowSplit::kColumns, 3);
  ASSERT_EQ(rows.exec->row_parts(), 3);
  for (int n : {48, 41, 24, 17}) {
    SCOPED_TRACE(n);
    const auto toks = RandomTokens(n, 70 + n, 1500);
    auto a = rows.State(), b = cols.State();
    const auto x = rows.Run(*a, toks), y = cols.Run(*b, toks);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
    EXPECT_EQ(rows.ctx->experts_used(), cols.ctx->experts_used());
    EXPECT_EQ(GdnBytes(*a, rows.model->hparams()), GdnBytes(*b, cols.model->hparams()));
  }
}

TEST(CpuExecutor, TwoSequencesInOneBatchMatchSeparateRuns) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  const auto p1 = RandomTokens(17, 10, 1500), p2 = RandomTokens(9, 11, 1500);
  auto a1 = r.State(), a2 = r.State(), b1 = r.State(), b2 = r.State();
  SequenceInput ins[2] = {{a1.get(), p1, PassKind::kCausal, LogitRows::kAll},
                          {a2.get(), p2, PassKind::kCausal, LogitRows::kLast}};
  r.exec->Forward(ins, *r.ctx);
  auto l1 = r.ctx->logits(0), l2 = r.ctx->logits(1);
  const std::vector<float> j1(l1.begin(), l1.end()), j2(l2.begin(), l2.end());
  EXPECT_LT(MaxAbsDiff(j1, r.Run(*b1, p1)), 2e-4f);
  EXPECT_LT(MaxAbsDiff(j2, r.Run(*b2, p2, PassKind::kCausal, LogitRows::kLast)), 2e-4f);
  // Mixed kinds in one batch: a denoise block next to a causal step.
  const auto blk = RandomTokens(6, 12, 1500);
  const int32_t step[1] = {42};
  SequenceInput mixed[2] = {{a1.get(), blk, PassKind::kDenoise, LogitRows::kAll},
                            {a2.get(), step, PassKind::kCausal, LogitRows::kLast}};
  r.exec->Forward(mixed, *r.ctx);
  EXPECT_EQ(a1->n_past(), 17);
  EXPECT_EQ(a2->n_past(), 10);
}

TEST(CpuExecutor, ForwardDoesNotAllocate) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  auto st = r.State();
  const auto prompt = RandomTokens(64, 13, 1500);
  const auto block = RandomTokens(16, 14, 1500);
  SequenceInput warm{st.get(), prompt, PassKind::kCausal, LogitRows::kLast};
  r.exec->Forward({&warm, 1}, *r.ctx);
  const int64_t before = AllocationCount();
  SequenceInput in[] = {{st.get(), block, PassKind::kDenoise, LogitRows::kAll},
                        {st.get(), block, PassKind::kCausal, LogitRows::kAll, true}};
  r.exec->Forward({&in[0], 1}, *r.ctx);
  r.exec->Forward({&in[1], 1}, *r.ctx);
  st->RollbackTo(5);
  SequenceInput fused{st.get(), block, PassKind::kCausal, LogitRows::kAll, true};
  fused.denoise_tail = 8;  // a fused pass: 8 committed tokens, then an 8-token denoise tail
  r.exec->Forward({&fused, 1}, *r.ctx);
  st->RollbackTo(5);
  for (int i = 0; i < 4; ++i) {
    SequenceInput one{st.get(), std::span(block).subspan(i, 1), PassKind::kCausal,
                      LogitRows::kLast};
    r.exec->Forward({&one, 1}, *r.ctx);
  }
  EXPECT_EQ(AllocationCount() - before, 0);
}

TEST(CpuExecutor, RejectsBadInputBeforeTouchingState) {
  Runner r(Synth("off.gguf", "clover_moe", "official"));
  auto st = r.State(16);
  const int32_t bad[] = {1, static_cast<int32_t>(r.n_vocab())};
  SequenceInput in{st.get(), bad};
  EXPECT_THROW(r.exec->Forward({&in, 1}, *r.ctx), Error);
  const auto too_long = RandomTokens(17, 1, 100);
  SequenceInput in2{st.get(), too_long};
  EXPECT_THROW(r.exec->Forward({&in2, 1}, *r.ctx), Error);
  EXPECT_EQ(st->n_past(), 0);
}

// ---- Loading traps: files rewritten from a synth model with one thing changed. ----

struct Edit {
  std::function<bool(std::string_view key, gguf::Value& v)> kv;  // false: drop the key
  std::function<void(gguf::Writer&)> extra_kvs;
  std::function<std::vector<int64_t>(const gguf::TensorInfo&)> shape;
  std::vector<std::pair<std::string, std::vector<int64_t>>> extra_tensors;  // F32, zeros
};

std::string Rewrite(const std::string& src, const std::string& name, const Edit& e) {
  gguf::File f = gguf::File::Open(src);
  const std::string out = TempPath(name);
  gguf::Writer w(out);
  for (const auto& kv : f.metadata()) {
    gguf::Value v = kv.value;
    if (e.kv && !e.kv(kv.key, v)) continue;
    w.AddKeyValue(std::string(kv.key), v);
  }
  if (e.extra_kvs) e.extra_kvs(w);
  std::vector<std::pair<const gguf::TensorInfo*, uint64_t>> order;
  for (const auto& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    if (e.shape) ne = e.shape(t);
    order.emplace_back(&t, w.AddTensor(t.name, t.type, ne));
  }
  for (const auto& [name, ne] : e.extra_tensors) w.AddTensor(name, GgmlType::kF32, ne);
  for (const auto& [t, bytes] : order) {
    std::vector<std::byte> buf(bytes, std::byte{0});
    std::memcpy(buf.data(), t->data, std::min<uint64_t>(bytes, t->nbytes));
    w.WriteTensorData(buf);
  }
  for (const auto& [name, ne] : e.extra_tensors) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<std::byte> zeros(static_cast<size_t>(n) * 4, std::byte{0});
    w.WriteTensorData(zeros);
  }
  w.Finish();
  return out;
}

std::string LoadError(const std::string& path) {
  try {
    LoadOptions lo;
    lo.logger = Logger::Silent();
    Model::Load(path, lo);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelTraps, NextnBlockIsOptional) {
  const std::string src = Synth("up.gguf", "qwen35moe", "upstream");
  gguf::File f = gguf::File::Open(src);
  const int64_t n_layer = *f.GetUint("qwen35moe.block_count");
  Edit e;
  e.kv = [](std::string_view key, gguf::Value& v) {
    if (key == "qwen35moe.block_count")
      v = gguf::Value::Uint32(static_cast<uint32_t>(*v.AsUint() + 1));
    return true;
  };
  e.extra_kvs = [](gguf::Writer& w) {
    w.AddKeyValue("qwen35moe.nextn_predict_layers", gguf::Value::Uint32(1));
  };
  const std::string blk = "blk." + std::to_string(n_layer) + ".";
  e.extra_tensors = {{blk + "nextn.eh_proj.weight", {512, 256}},
                     {blk + "nextn.enorm.weight", {256}}};
  const std::string path = Rewrite(src, "nextn.gguf", e);
  Runner with(path), without(src);
  EXPECT_EQ(with.model->hparams().n_layer, n_layer);
  const auto toks = RandomTokens(10, 20, 1500);
  auto a = with.State(), b = without.State();
  EXPECT_EQ(MaxAbsDiff(with.Run(*a, toks), without.Run(*b, toks)), 0.0f);
}

TEST(ModelTraps, ShapeMismatchNamesTheTensor) {
  const std::string src = Synth("up.gguf", "qwen35moe", "upstream");
  Edit e;
  e.shape = [](const gguf::TensorInfo& t) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    if (t.name == "blk.1.ssm_out.weight") ne[1] /= 2;
    return ne;
  };
  const std::string msg = LoadError(Rewrite(src, "shape.gguf", e));
  EXPECT_NE(msg.find("blk.1.ssm_out.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
}

TEST(ModelTraps, ZeroSizedDimensionIsAnError) {
  const std::string src = Synth("up.gguf", "qwen35moe", "upstream");
  Edit e;
  e.kv = [](std::string_view key, gguf::Value& v) {
    if (key == "qwen35moe.expert_feed_forward_length") v = gguf::Value::Uint32(0);
    return true;
  };
  const std::string msg = LoadError(Rewrite(src, "zero.gguf", e));
  EXPECT_NE(msg.find("expert_feed_forward_length"), std::string::npos) << msg;
}

TEST(ModelTraps, TruncatedFileIsAnError) {
  const std::string src = Synth("up.gguf", "qwen35moe", "upstream");
  const std::string dst = TempPath("trunc.gguf");
  std::filesystem::copy_file(src, dst, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(dst, std::filesystem::file_size(src) - 1000);
  EXPECT_NE(LoadError(dst), "");
}

TEST(ModelTraps, MissingTensorSaysWhatIsMissing) {
  const std::string src = Synth("up.gguf", "qwen35moe", "upstream");
  gguf::File f = gguf::File::Open(src);
  const std::string out = TempPath("missing.gguf");
  {
    gguf::Writer w(out);
    for (const auto& kv : f.metadata()) w.AddKeyValue(std::string(kv.key), kv.value);
    for (const auto& t : f.tensors()) {
      if (t.name == "blk.2.ffn_up_exps.weight") continue;
      w.AddTensor(t.name, t.type, std::span(t.ne.data(), t.n_dims));
    }
    for (const auto& t : f.tensors()) {
      if (t.name != "blk.2.ffn_up_exps.weight") w.WriteTensorData(t.bytes());
    }
    w.Finish();
  }
  const std::string msg = LoadError(out);
  EXPECT_NE(msg.find("blk.2.ffn_up_exps.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
}

}  // namespace
}  // namespace crossword::model
