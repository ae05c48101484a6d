// SequenceState: KV cache + GDN state storage, snapshots, and rollback by replaying the
// recorded gated-delta-rule inputs (docs/decoding.md, "GDN rollback by replay").
#include "model/state.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/kernels.h"

namespace crossword::model {

SequenceState::SequenceState(const Hparams& hp, const StateOptions& options)
    : hp_(hp), n_ctx_(options.n_ctx), kv_type_(options.kv_type) {
  if (n_ctx_ < 1) Fail("state: n_ctx must be >= 1 (got {})", n_ctx_);
  if (kv_type_ != GgmlType::kF16 && kv_type_ != GgmlType::kF32) {
    Fail("state: KV cache type must be F16 or F32 (got {})", TypeName(kv_type_));
  }
  if (options.max_record_tokens < 0) Fail("state: max_record_tokens must be >= 0");
  kv_row_elems_ = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  kv_elem_bytes_ = kv_type_ == GgmlType::kF16 ? 2 : 4;
  kv_.resize(static_cast<size_t>(hp.n_attention()) * 2 * static_cast<size_t>(n_ctx_) *
             static_cast<size_t>(kv_row_elems_) * kv_elem_bytes_);
  conv_floats_ = static_cast<int64_t>(hp.ssm_d_conv - 1) * hp.conv_dim();
  ssm_floats_ = static_cast<int64_t>(hp.ssm_n_v_heads) * hp.ssm_d_state * hp.ssm_d_state;
  gdn_layer_floats_ = conv_floats_ + ssm_floats_;
  gdn_.assign(static_cast<size_t>(hp.n_recurrent() * gdn_layer_floats_), 0.0f);
  max_rec_ = options.max_record_tokens;
  if (max_rec_ > 0) {
    rec_layer_floats_ = gdn_layer_floats_ + max_rec_ * (2 * hp.conv_dim() + 2 * hp.ssm_n_v_heads);
    rec_.assign(static_cast<size_t>(hp.n_recurrent() * rec_layer_floats_), 0.0f);
    rec_out_.assign(static_cast<size_t>(max_rec_ * hp.ssm_d_inner), 0.0f);
  }
}

size_t SequenceState::MemoryBytes() const {
  return kv_.size() + (gdn_.size() + rec_.size() + rec_out_.size()) * sizeof(float);
}

size_t SequenceState::KvOffset(int a, int kv) const {
  const size_t plane =
      static_cast<size_t>(n_ctx_) * static_cast<size_t>(kv_row_elems_) * kv_elem_bytes_;
  return (static_cast<size_t>(a) * 2 + static_cast<size_t>(kv)) * plane;
}

void SequenceState::Reset() {
  n_past_ = 0;
  high_water_ = 0;
  ++generation_;
  rewrite_pos_[generation_ % kRewriteLog] = 0;
  rec_T_ = 0;
  std::fill(gdn_.begin(), gdn_.end(), 0.0f);
}

void SequenceState::SaveSnapshot(StateSnapshot& snapshot) const {
  snapshot.n_past = n_past_;
  snapshot.generation = generation_;
  snapshot.gdn.assign(gdn_.begin(), gdn_.end());
}

bool SequenceState::CanRestore(const StateSnapshot& s) const {
  if (!s.valid() || s.gdn.size() != gdn_.size() || s.n_past > n_ctx_) return false;
  if (s.generation > generation_) return false;
  if (generation_ - s.generation >= kRewriteLog) return false;  // history no longer known
  for (uint64_t g = s.generation + 1; g <= generation_; ++g) {
    if (rewrite_pos_[g % kRewriteLog] < s.n_past) return false;
  }
  return true;
}

void SequenceState::Restore(const StateSnapshot& s) {
  if (!CanRestore(s)) {
    Fail(
        "state: cannot restore a snapshot at {} tokens: the sequence was rewritten before that "
        "point since the snapshot was taken (or the snapshot belongs to another model)",
        s.n_past);
  }
  std::copy(s.gdn.begin(), s.gdn.end(), gdn_.begin());
  n_past_ = s.n_past;
  rec_T_ = 0;
}

void SequenceState::NoteKvWrite(int64_t pos, int64_t T) {
  if (pos < high_water_) {
    ++generation_;
    rewrite_pos_[generation_ % kRewriteLog] = pos;
  }
  high_water_ = std::max(high_water_, pos + T);
}

void SequenceState::Advance(int64_t T, bool recorded) {
  rec_start_ = n_past_;
  rec_T_ = recorded ? T : 0;
  n_past_ += T;
}

SequenceState::Record SequenceState::record(int r) {
  float* base = rec_.data() + r * rec_layer_floats_;
  Record rec;
  rec.conv0 = base;
  rec.ssm0 = base + conv_floats_;
  rec.qkv = base + gdn_layer_floats_;
  rec.qkv_conv = rec.qkv + max_rec_ * hp_.conv_dim();
  rec.g = rec.qkv_conv + max_rec_ * hp_.conv_dim();
  rec.beta = rec.g + max_rec_ * hp_.ssm_n_v_heads;
  return rec;
}

void SequenceState::RollbackTo(int64_t n_keep, ThreadPool& pool) {
  if (rec_T_ == 0) Fail("state: RollbackTo needs a recorded pass (forward with record = true)");
  if (n_keep < 0 || n_keep > rec_T_)
    Fail("state: RollbackTo({}) outside the recorded pass of {} tokens", n_keep, rec_T_);
  if (n_keep == rec_T_) return;
  const int64_t conv_dim = hp_.conv_dim();
  const int64_t key_dim = hp_.ssm_key_dim();
  const int K1 = hp_.ssm_d_conv - 1;
  for (int r = 0; r < hp_.n_recurrent(); ++r) {
    Record rec = record(r);
    // Conv window: the last K-1 rows of concat(conv0, qkv[0, n_keep)).
    float* conv = conv_state(r);
    for (int j = 0; j < K1; ++j) {
      const int64_t src = n_keep - K1 + j;  // index into qkv rows; negative -> conv0 row
      const float* row = src >= 0 ? rec.qkv + src * conv_dim : rec.conv0 + (K1 + src) * conv_dim;
      std::memcpy(conv + j * conv_dim, row, sizeof(float) * conv_dim);
    }
    float* ssm = ssm_state(r);
    std::memcpy(ssm, rec.ssm0, sizeof(float) * ssm_floats_);
    if (n_keep == 0) continue;
    kernels::GdnArgs a;
    a.T = n_keep;
    a.n_k_heads = hp_.ssm_n_k_heads;
    a.n_v_heads = hp_.ssm_n_v_heads;
    a.dk = a.dv = hp_.ssm_d_state;
    a.q = rec.qkv_conv;
    a.k = rec.qkv_conv + key_dim;
    a.v = rec.qkv_conv + 2 * key_dim;
    a.ldq = a.ldk = a.ldv = conv_dim;
    a.g = rec.g;
    a.beta = rec.beta;
    a.ldg = hp_.ssm_n_v_heads;
    a.state = ssm;
    a.out = rec_out_.data();
    a.ldo = hp_.ssm_d_inner;
    a.mode =
        kernels::GdnMode::kRecurrent;  // same order of operations as the verify pass for T < 64
    kernels::GatedDeltaRule(a, pool);
  }
  n_past_ = rec_start_ + n_keep;
  rec_T_ = 0;
}

}  // namespace crossword::model
