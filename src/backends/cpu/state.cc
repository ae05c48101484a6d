// CpuState: KV cache + GDN state storage in host memory, snapshots, and rollback by replaying
// the recorded gated-delta-rule inputs (docs/decoding.md, "GDN rollback by replay").
#include "backends/cpu/state.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/kernels.h"

namespace crossword::backends::cpu {

using model::HostSnapshot;

CpuState::CpuState(const model::Executor& executor, const model::Hparams& hp,
                   const model::StateOptions& options, ThreadPool& pool)
    : model::SequenceState(executor, options), hp_(hp), pool_(pool) {
  kv_row_elems_ = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  kv_elem_bytes_ = kv_type() == GgmlType::kF16 ? 2 : 4;
  kv_.resize(static_cast<size_t>(hp.n_attention()) * 2 * static_cast<size_t>(n_ctx()) *
             static_cast<size_t>(kv_row_elems_) * kv_elem_bytes_);
  conv_floats_ = static_cast<int64_t>(hp.ssm_d_conv - 1) * hp.conv_dim();
  ssm_floats_ = static_cast<int64_t>(hp.ssm_n_v_heads) * hp.ssm_d_state * hp.ssm_d_state;
  gdn_layer_floats_ = conv_floats_ + ssm_floats_;
  gdn_.assign(static_cast<size_t>(hp.n_recurrent() * gdn_layer_floats_), 0.0f);
  const int64_t max_rec = options.max_record_tokens;
  if (max_rec > 0) {
    rec_layer_floats_ = gdn_layer_floats_ + max_rec * (2 * hp.conv_dim() + 2 * hp.ssm_n_v_heads);
    rec_.assign(static_cast<size_t>(hp.n_recurrent() * rec_layer_floats_), 0.0f);
    rec_out_.assign(static_cast<size_t>(max_rec * hp.ssm_d_inner), 0.0f);
  }
}

size_t CpuState::MemoryBytes() const {
  return kv_.size() + (gdn_.size() + rec_.size() + rec_out_.size()) * sizeof(float);
}

size_t CpuState::KvOffset(int a, int kv) const {
  const size_t plane =
      static_cast<size_t>(n_ctx()) * static_cast<size_t>(kv_row_elems_) * kv_elem_bytes_;
  return (static_cast<size_t>(a) * 2 + static_cast<size_t>(kv)) * plane;
}

void CpuState::ResetRecurrent() { std::fill(gdn_.begin(), gdn_.end(), 0.0f); }

void CpuState::SaveRecurrent(std::unique_ptr<model::SnapshotPayload>& payload) const {
  auto* host = dynamic_cast<HostSnapshot*>(payload.get());
  if (!host) {
    auto fresh = std::make_unique<HostSnapshot>();
    host = fresh.get();
    payload = std::move(fresh);
  }
  host->gdn.assign(gdn_.begin(), gdn_.end());
}

bool CpuState::RecurrentFits(const model::SnapshotPayload& payload) const {
  const auto* host = dynamic_cast<const HostSnapshot*>(&payload);
  return host && host->gdn.size() == gdn_.size();
}

void CpuState::RestoreRecurrent(const model::SnapshotPayload& payload) {
  const auto& host = static_cast<const HostSnapshot&>(payload);
  std::copy(host.gdn.begin(), host.gdn.end(), gdn_.begin());
}

CpuState::Record CpuState::record(int r) {
  float* base = rec_.data() + r * rec_layer_floats_;
  Record rec;
  rec.conv0 = base;
  rec.ssm0 = base + conv_floats_;
  rec.qkv = base + gdn_layer_floats_;
  rec.qkv_conv = rec.qkv + max_record_tokens() * hp_.conv_dim();
  rec.g = rec.qkv_conv + max_record_tokens() * hp_.conv_dim();
  rec.beta = rec.g + max_record_tokens() * hp_.ssm_n_v_heads;
  return rec;
}

void CpuState::ReplayRecurrent(int64_t n_keep) {
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
    kernels::GatedDeltaRule(a, pool_);
  }
}

}  // namespace crossword::backends::cpu
