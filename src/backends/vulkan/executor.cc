// VulkanExecutor: footprint check, weight upload, pass scratch, sequence states on the device
// (snapshots, rollback), and Forward (validation, chunking, replay of recorded lists).
#include "backends/vulkan/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/vulkan/executor_internal.h"
#include "backends/vulkan/ops.h"
#include "base/error.h"
#include "base/log.h"
#include "core/types.h"

namespace crossword::vulkan {

namespace {

using model::Hparams;
using model::LogitRows;
using model::PassKind;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

uint64_t MatrixBytes(const kernels::Matrix& m) {
  return m.data ? m.row_bytes * static_cast<uint64_t>(m.n_out) : 0;
}

uint64_t StackBytes(const model::ExpertTensor& e) {
  return MatrixBytes(e.first) * static_cast<uint64_t>(e.n_expert);
}

uint64_t VecBytes(const std::vector<float>& v) { return v.size() * sizeof(float); }

// Scratch sizes in bytes, in the order Scratch is allocated (one list for Footprint and the
// allocation, so the check and the use cannot disagree).
struct ScratchSizes {
  uint64_t host_ids, host_logits;
  std::vector<uint64_t> device;
};

int64_t MaxQuantRows(const Hparams& hp, const ExecutorOptions& o) {
  return std::max({o.max_tokens * hp.n_expert_used, o.max_tokens, o.max_logit_rows});
}

int64_t MaxQuantInputs(const Hparams& hp) {
  return std::max({hp.n_embd, hp.ssm_d_inner, static_cast<int64_t>(hp.n_head) * hp.head_dim,
                   hp.n_ff_exp, hp.n_ff_shexp});
}

ScratchSizes PlanScratch(const Hparams& hp, const ExecutorOptions& o) {
  const uint64_t T = static_cast<uint64_t>(o.max_tokens);
  const uint64_t R = static_cast<uint64_t>(std::max(o.max_logit_rows, o.max_tokens));
  const uint64_t E = hp.n_embd, k = hp.n_expert_used, nv = hp.ssm_n_v_heads;
  const uint64_t q_dim = static_cast<uint64_t>(hp.n_head) * hp.head_dim;
  const uint64_t kv_dim = static_cast<uint64_t>(hp.n_head_kv) * hp.head_dim;
  const uint64_t conv_state = static_cast<uint64_t>(hp.ssm_d_conv - 1) * hp.conv_dim();
  const uint64_t ssm_state = nv * hp.ssm_d_state * hp.ssm_d_state;
  const uint64_t words = ActQ8RowWords(GgmlType::kQ4_K, MaxQuantInputs(hp) / 256 * 256 + 256);
  const uint64_t xq = static_cast<uint64_t>(MaxQuantRows(hp, o)) * words * 4;
  const uint64_t f = 4;
  ScratchSizes s;
  s.host_ids = T * 4;
  s.host_logits = R * hp.n_vocab * f;
  s.device = {T * E * f,
              T * E * f,
              T * E * f,
              T * hp.conv_dim() * f,
              T * hp.conv_dim() * f,
              T * hp.ssm_d_inner * f,
              T * hp.ssm_d_inner * f,
              T * nv * f,
              T * nv * f,
              T * nv * f,
              T * nv * f,
              conv_state * f,
              ssm_state * f,
              T * 2 * q_dim * f,
              T * kv_dim * f,
              T * kv_dim * f,
              T * q_dim * f,
              static_cast<uint64_t>(AttentionScratchFloats(o.max_tokens, std::max(hp.n_head, 1), 32,
                                                           std::max<int64_t>(hp.head_dim, 2))) *
                  f,
              T * hp.n_expert * f,
              T * k * 4,
              T * k * f,
              static_cast<uint64_t>(MoeGroupLayoutFor(o.max_tokens, std::max(hp.n_expert_used, 1),
                                                      std::max(hp.n_expert, 1))
                                        .words) *
                  4,
              T * k * hp.n_ff_exp * f,
              T * hp.n_ff_shexp * f,
              T * k * E * f,
              T * E * f,
              xq,
              xq,
              R * E * f};
  for (uint64_t& b : s.device) b = std::max<uint64_t>(b, 16);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Footprint and construction.

DeviceFootprint VulkanExecutor::Footprint(const model::Model& model,
                                          const ExecutorOptions& options) {
  const model::Weights& w = model.weights();
  const Hparams& hp = model.hparams();
  DeviceFootprint f;
  const int n = options.n_layers < 0 ? hp.n_layer : std::min(options.n_layers, hp.n_layer);
  f.weights = static_cast<uint64_t>(hp.n_vocab) * w.token_embd_row_bytes;
  if (n == hp.n_layer) {  // the head runs here (a split's runs on the CPU)
    f.weights += VecBytes(w.output_norm);
    if (w.output.data != w.token_embd) f.weights += MatrixBytes(w.output);
  }
  for (int il = 0; il < n; ++il) {
    const model::LayerWeights& L = w.layers[static_cast<size_t>(il)];
    for (const kernels::Matrix* m : L.DenseMatrices()) f.weights += MatrixBytes(*m);
    for (const model::ExpertTensor* e : L.ExpertStacks()) f.weights += StackBytes(*e);
    for (const std::vector<float>* v :
         {&L.attn_norm, &L.post_attention_norm, &L.attn_q_norm, &L.attn_k_norm, &L.ssm_dt_bias,
          &L.ssm_a, &L.ssm_conv1d, &L.ssm_norm, &L.ffn_gate_inp_shexp}) {
      f.weights += VecBytes(*v);
    }
  }
  const ScratchSizes s = PlanScratch(hp, options);
  for (uint64_t b : s.device) f.scratch += b;
  return f;
}

uint64_t VulkanExecutor::StateBytes(const Hparams& hp, const model::StateOptions& o) {
  const uint64_t conv = static_cast<uint64_t>(hp.ssm_d_conv - 1) * hp.conv_dim();
  const uint64_t ssm = static_cast<uint64_t>(hp.ssm_n_v_heads) * hp.ssm_d_state * hp.ssm_d_state;
  const uint64_t rec = static_cast<uint64_t>(o.max_record_tokens);
  uint64_t floats = hp.n_recurrent() * (conv + ssm);
  if (rec > 0) {
    floats += hp.n_recurrent() * (conv + ssm + rec * (2 * hp.conv_dim() + 2 * hp.ssm_n_v_heads));
  }
  const uint64_t kv =
      static_cast<uint64_t>(hp.n_attention()) * 2 * o.n_ctx * hp.n_head_kv * hp.head_dim * 2;
  const uint64_t rope = static_cast<uint64_t>(o.n_ctx) * (hp.n_rot / 2) * 8;
  return floats * 4 + kv + rope;
}

VulkanExecutor::VulkanExecutor(Device& device, std::shared_ptr<const model::Model> model_ptr,
                               const ExecutorOptions& options)
    : device_(device), model_(std::move(model_ptr)), options_(options) {
  Check(model_ != nullptr, "vulkan executor: no model");
  const model::Model& model = *model_;
  const Hparams& hp = model.hparams();
  Check(options.max_tokens >= 1 && options.max_logit_rows >= 1 && options.max_recorded_shapes >= 1,
        "vulkan executor: max_tokens, max_logit_rows and max_recorded_shapes must be >= 1");
  const DeviceFootprint need = Footprint(model, options);
  const uint64_t have =
      options.memory_limit > 0 ? options.memory_limit : device.info().device_local_bytes;
  if (have > 0 && need.total() > have) {
    Fail(
        "vulkan: the model needs {:.2f} GiB of device memory (weights {:.2f} GiB + pass scratch "
        "{:.2f} GiB, before the KV cache and recurrent state of each sequence); device '{}' has "
        "{:.2f} GiB. Keep fewer layers on the GPU (-ngl N runs layers below N there and the rest "
        "on the CPU), use a smaller quantization, or run on the CPU (--device cpu)",
        need.total() / kGiB, need.weights / kGiB, need.scratch / kGiB, device.info().name,
        have / kGiB);
  }
  n_layers_ = options.n_layers < 0 ? hp.n_layer : std::min(options.n_layers, hp.n_layer);
  for (int il = 0, n_rec = 0, n_att = 0; il < hp.n_layer; ++il)
    layer_slot_.push_back(hp.is_recurrent(il) ? n_rec++ : n_att++);
  weights_pool_ = std::make_unique<MemoryPool>(device_, MemoryKind::kDevice);
  scratch_pool_ = std::make_unique<MemoryPool>(device_, MemoryKind::kDevice);
  host_pool_ = std::make_unique<MemoryPool>(device_, MemoryKind::kHost, uint64_t{16} << 20);
  Upload();

  const ScratchSizes sz = PlanScratch(hp, options);
  s_ = std::make_unique<Scratch>();
  Scratch& s = *s_;
  s.ids = host_pool_->Allocate(sz.host_ids, "token ids of a pass");
  s.logits = host_pool_->Allocate(sz.host_logits, "logits of a pass");
  s.hidden = host_pool_->Allocate(static_cast<uint64_t>(options.max_tokens) * hp.n_embd * 4,
                                  "hidden state of a split pass");
  BufferView* dev[] = {&s.x,         &s.h,        &s.cur,    &s.qkv,   &s.conv, &s.z,
                       &s.o,         &s.b,        &s.a,      &s.g,     &s.beta, &s.conv_state,
                       &s.ssm_state, &s.qg,       &s.kk,     &s.vv,    &s.ao,   &s.attn,
                       &s.router,    &s.topk_ids, &s.topk_w, &s.group, &s.hff,  &s.hsh,
                       &s.down,      &s.sh,       &s.xq0,    &s.xqk,   &s.outh};
  static_assert(sizeof(dev) / sizeof(dev[0]) == 29);
  Check(sz.device.size() == 29, "vulkan executor: scratch plan out of step");
  for (size_t i = 0; i < sz.device.size(); ++i)
    *dev[i] = scratch_pool_->Allocate(sz.device[i], "pass scratch (activations)");
}

VulkanExecutor::~VulkanExecutor() = default;

std::unique_ptr<VulkanExecutor> VulkanExecutor::Open(std::shared_ptr<const model::Model> model,
                                                     const DeviceOptions& device,
                                                     const ExecutorOptions& options) {
  std::unique_ptr<Device> dev = Device::Open(device);
  auto e = std::make_unique<VulkanExecutor>(*dev, std::move(model), options);
  e->owned_device_ = std::move(dev);  // the address stays; destroyed after every other member
  return e;
}

std::string VulkanExecutor::Describe() const {
  return fmt::format("Vulkan {} ({:.1f} MiB of weights, passes of {} tokens)",
                     DescribeDevice(device_.info()), weight_bytes_ / 1048576.0,
                     options_.max_tokens);
}

void VulkanExecutor::Upload() {
  const model::Weights& w = model_->weights();
  const Hparams& hp = model_->hparams();
  Uploader up(device_);
  MemoryPool& pool = *weights_pool_;
  const bool generate = options_.generate_weights_seed != 0;
  std::vector<std::pair<GgmlType, BufferView>> generated;  // pieces to fill on the device
  std::vector<std::vector<float>> constants;               // generated vectors (upload sources)
  auto place = [&](DeviceMatrix& d, const void* data, const std::string& name) {
    if (!generate) return UploadMatrix(pool, up, d, data, name);
    AllocateMatrix(pool, d, name);
    for (const DeviceMatrix::Piece& p : d.pieces) generated.emplace_back(d.type, p.view);
  };
  auto mat = [&](const kernels::Matrix& m, const std::string& name) {
    DeviceMatrix d = DeviceMatrix::Of(m.type, m.n_in, m.n_out);
    place(d, m.data, name);
    return d;
  };
  auto vec = [&](const std::vector<float>& v, const std::string& name) {
    if (v.empty()) return BufferView{};
    const std::vector<float>* src = &v;
    if (generate) {  // plain constants that keep 40 layers finite (the file holds zeros)
      float c = 0.0f;
      if (name.ends_with("norm.weight")) c = 1.0f;
      if (name.ends_with("ssm_a")) c = -0.5f;
      if (name.ends_with("ssm_conv1d.weight")) c = 0.1f;
      constants.emplace_back(v.size(), c);
      src = &constants.back();
    }
    return UploadBytes(pool, up, src->data(), VecBytes(*src), name);
  };
  auto gate_up = [&](const kernels::Matrix& g, const kernels::Matrix& u, int64_t n_expert,
                     const std::string& name) {
    Check(g.type == u.type,
          "vulkan: {}: the gate ({}) and up ({}) weights must have the same type to be fused", name,
          TypeName(g.type), TypeName(u.type));
    DeviceMatrix d = DeviceMatrix::Of(g.type, g.n_in, 2 * g.n_out, n_expert);
    if (generate) {
      place(d, nullptr, name);
    } else {
      UploadGateUp(pool, up, d, g.data, u.data, name);
    }
    return d;
  };

  token_embd_ =
      std::make_unique<DeviceMatrix>(DeviceMatrix::Of(w.token_embd_type, hp.n_embd, hp.n_vocab));
  place(*token_embd_, w.token_embd, "token_embd.weight");
  if (w.output.data == w.token_embd || n_layers_ < hp.n_layer) {
    output_matrix_ = token_embd_.get();  // tied, or unused (a split's head runs on the CPU)
  } else {
    output_ = std::make_unique<DeviceMatrix>(mat(w.output, "output.weight"));
    output_matrix_ = output_.get();
  }
  output_norm_ = vec(w.output_norm, "output_norm.weight");
  layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < n_layers_; ++il) {
    const model::LayerWeights& L = w.layers[static_cast<size_t>(il)];
    Layer& d = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    d.recurrent = L.is_recurrent();
    d.attn_norm = vec(L.attn_norm, p + "attn_norm.weight");
    d.post_attention_norm = vec(L.post_attention_norm, p + "post_attention_norm.weight");
    if (L.is_recurrent()) {
      d.attn_qkv = mat(L.attn_qkv, p + "attn_qkv.weight");
      d.attn_gate = mat(L.attn_gate, p + "attn_gate.weight");
      d.ssm_beta = mat(L.ssm_beta, p + "ssm_beta.weight");
      d.ssm_alpha = mat(L.ssm_alpha, p + "ssm_alpha.weight");
      d.ssm_out = mat(L.ssm_out, p + "ssm_out.weight");
      d.ssm_dt_bias = vec(L.ssm_dt_bias, p + "ssm_dt.bias");
      d.ssm_a = vec(L.ssm_a, p + "ssm_a");
      d.ssm_conv1d = vec(L.ssm_conv1d, p + "ssm_conv1d.weight");
      d.ssm_norm = vec(L.ssm_norm, p + "ssm_norm.weight");
    } else {
      d.attn_q = mat(L.attn_q, p + "attn_q.weight");
      d.attn_k = mat(L.attn_k, p + "attn_k.weight");
      d.attn_v = mat(L.attn_v, p + "attn_v.weight");
      d.attn_output = mat(L.attn_output, p + "attn_output.weight");
      d.attn_q_norm = vec(L.attn_q_norm, p + "attn_q_norm.weight");
      d.attn_k_norm = vec(L.attn_k_norm, p + "attn_k_norm.weight");
    }
    d.ffn_gate_inp = mat(L.ffn_gate_inp, p + "ffn_gate_inp.weight");
    d.gate_up_exps = gate_up(L.ffn_gate_exps.first, L.ffn_up_exps.first, hp.n_expert,
                             p + "ffn_gate_exps/ffn_up_exps");
    d.down_exps = DeviceMatrix::Of(L.ffn_down_exps.first.type, hp.n_ff_exp, hp.n_embd, hp.n_expert);
    place(d.down_exps, L.ffn_down_exps.first.data, p + "ffn_down_exps.weight");
    if (hp.n_expert_shared > 0) {
      d.gate_up_shexp = gate_up(L.ffn_gate_shexp, L.ffn_up_shexp, 1, p + "ffn_gate/up_shexp");
      d.down_shexp = mat(L.ffn_down_shexp, p + "ffn_down_shexp.weight");
      d.ffn_gate_inp_shexp = vec(L.ffn_gate_inp_shexp, p + "ffn_gate_inp_shexp.weight");
    }
  }
  weight_bytes_ = pool.allocated_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  up.Run(options_.progress);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (generate) {
    CommandList cl(device_);
    cl.Begin({});
    uint32_t seed = options_.generate_weights_seed;
    for (const auto& [type, view] : generated) SynthWeights(cl, type, view, seed++);
    cl.End();
    cl.Run();
    device_.logger().Info(
        "vulkan: {:.1f} MiB of weights generated on '{}' in {:.2f} s", weight_bytes_ / 1048576.0,
        device_.info().name,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return;
  }
  device_.logger().Info("vulkan: {:.1f} MiB of weights on '{}' in {:.2f} s ({:.2f} GB/s)",
                        weight_bytes_ / 1048576.0, device_.info().name, sec,
                        sec > 0 ? weight_bytes_ / sec / 1e9 : 0.0);
}

// ---------------------------------------------------------------------------------------------
// Sequence states.

namespace {

/// A recorded pass is one pass, and no pass here exceeds the executor's tokens per pass: a larger
/// request (the engine asks for max(block, 256) to suit every executor) is served at that size.
model::StateOptions ClampRecording(const VulkanExecutor& exec, model::StateOptions o) {
  o.max_record_tokens = std::min<int64_t>(o.max_record_tokens, exec.options().max_tokens);
  return o;
}

}  // namespace

DeviceState::DeviceState(const VulkanExecutor& exec, const model::StateOptions& requested)
    : model::SequenceState(exec, ClampRecording(exec, requested)), exec_(exec) {
  const model::StateOptions o = ClampRecording(exec, requested);
  const Hparams& hp = exec.hparams();
  Check(o.kv_type == GgmlType::kF16,
        "vulkan state: the KV cache on the GPU is F16 (asked for {}); use an F16 cache or "
        "--device cpu",
        TypeName(o.kv_type));
  Device& dev = exec.device();
  const uint64_t align = dev.alignment();
  const int n_rec = hp.n_recurrent(), n_att = hp.n_attention();
  const int64_t n_ctx = o.n_ctx, max_rec = o.max_record_tokens;
  const uint64_t slack = (static_cast<uint64_t>(n_rec) * 8 + n_att * 2 + 4) * align;
  pool_ = std::make_unique<MemoryPool>(dev, MemoryKind::kDevice,
                                       VulkanExecutor::StateBytes(hp, o) + slack);
  host_pool_ = std::make_unique<MemoryPool>(dev, MemoryKind::kHost, 4096);
  params_ = host_pool_->Allocate(16, "pass parameters");
  std::memset(params_.host, 0, 16);
  const uint64_t conv = static_cast<uint64_t>(hp.ssm_d_conv - 1) * hp.conv_dim() * 4;
  const uint64_t ssm =
      static_cast<uint64_t>(hp.ssm_n_v_heads) * hp.ssm_d_state * hp.ssm_d_state * 4;
  try {
    std::vector<BufferView> zero;
    if (n_rec > 0) {
      gdn_all_ = pool_->Allocate(n_rec * (conv + ssm), "GDN states of a sequence");
      zero.push_back(gdn_all_);
    }
    for (int r = 0; r < n_rec; ++r) {
      GdnLayerState g;
      const uint64_t at = r * (conv + ssm);
      g.conv = conv > 0 ? gdn_all_.Sub(at, conv) : BufferView{};
      g.ssm = gdn_all_.Sub(at + conv, ssm);
      if (max_rec > 0) {
        const uint64_t rows = static_cast<uint64_t>(max_rec);
        if (conv > 0) g.conv0 = pool_->Allocate(conv, "GDN recording (conv)");
        g.ssm0 = pool_->Allocate(ssm, "GDN recording (ssm)");
        g.qkv = pool_->Allocate(rows * hp.conv_dim() * 4, "GDN recording (conv inputs)");
        g.qkv_conv = pool_->Allocate(rows * hp.conv_dim() * 4, "GDN recording (q, k, v)");
        g.g = pool_->Allocate(rows * hp.ssm_n_v_heads * 4, "GDN recording (g)");
        g.beta = pool_->Allocate(rows * hp.ssm_n_v_heads * 4, "GDN recording (beta)");
      }
      gdn_.push_back(g);
    }
    const uint64_t kv = static_cast<uint64_t>(n_ctx) * hp.n_head_kv * hp.head_dim * 2;
    for (int a = 0; a < n_att; ++a) {
      k_cache_.push_back(pool_->Allocate(kv, "KV cache"));
      v_cache_.push_back(pool_->Allocate(kv, "KV cache"));
      zero.push_back(k_cache_.back());
      zero.push_back(v_cache_.back());
    }
    if (n_att > 0) {
      const std::vector<float> table = RopeTable(n_ctx, hp.n_rot, hp.rope_freq_base);
      rope_ = pool_->Allocate(std::max<uint64_t>(table.size() * 4, 16), "rope table");
      WriteBuffer(dev, rope_, table.data(), table.size() * 4);
    }
    CommandList cl(dev);
    cl.Begin({});
    for (const BufferView& v : zero) cl.Fill(v, 0);
    cl.End();
    cl.Run();
  } catch (const Error& e) {
    Fail("{} (a sequence of {} tokens needs {:.1f} MiB on the device; lower -c)", e.what(), n_ctx,
         VulkanExecutor::StateBytes(hp, o) / 1048576.0);
  }
}

DeviceState::~DeviceState() = default;

size_t DeviceState::MemoryBytes() const {
  return pool_->allocated_bytes() + host_pool_->allocated_bytes();
}

void DeviceState::ResetRecurrent() {
  if (!gdn_all_.valid()) return;
  CommandList cl(exec_.device());
  cl.Begin({});
  cl.Fill(gdn_all_, 0);
  cl.End();
  cl.Run();
}

std::vector<float> DeviceState::ReadGdnState() const {
  std::vector<float> v(gdn_all_.size / 4);
  if (!v.empty()) ReadBuffer(exec_.device(), gdn_all_, v.data(), gdn_all_.size);
  return v;
}

namespace {

// A snapshot's GDN states in host memory (layer by layer, conv then SSM: this state's device
// layout). Prompt-cache checkpoints live in host memory, as llama.cpp keeps them by default.
struct GdnPayload final : model::SnapshotPayload {
  std::vector<float> gdn;
  size_t MemoryBytes() const override { return gdn.size() * sizeof(float); }
};

}  // namespace

void DeviceState::SaveRecurrent(std::unique_ptr<model::SnapshotPayload>& payload) const {
  auto* p = dynamic_cast<GdnPayload*>(payload.get());
  if (!p) {
    payload = std::make_unique<GdnPayload>();
    p = static_cast<GdnPayload*>(payload.get());
  }
  p->gdn.resize(gdn_all_.size / 4);
  if (!p->gdn.empty()) ReadBuffer(exec_.device(), gdn_all_, p->gdn.data(), gdn_all_.size);
}

bool DeviceState::RecurrentFits(const model::SnapshotPayload& payload) const {
  const auto* p = dynamic_cast<const GdnPayload*>(&payload);
  return p && p->gdn.size() == gdn_all_.size / 4;
}

void DeviceState::RestoreRecurrent(const model::SnapshotPayload& payload) {
  const auto& p = static_cast<const GdnPayload&>(payload);
  if (!p.gdn.empty()) WriteBuffer(exec_.device(), gdn_all_, p.gdn.data(), gdn_all_.size);
}

void DeviceState::ReplayRecurrent(int64_t n_keep) {
  if (!rollback_) {
    rollback_ = std::make_unique<CommandList>(exec_.device());
    rollback_->Begin(params_, exec_.options().ops);
    exec_.RecordRollback(*rollback_, *this);
    rollback_->End();
  }
  reinterpret_cast<int32_t*>(params_.host)[1] = static_cast<int32_t>(n_keep);
  rollback_->Run();
}

std::unique_ptr<model::SequenceState> VulkanExecutor::NewState(
    const model::StateOptions& options) const {
  return std::unique_ptr<model::SequenceState>(new DeviceState(*this, options));
}

VulkanContext::VulkanContext(const VulkanExecutor& executor, const model::ContextOptions& options)
    : model::ForwardContext(executor, options), n_vocab_(executor.hparams().n_vocab) {
  if (options.max_tokens < 1 || options.max_seqs < 1 || options.max_logit_rows < 1) {
    Fail("forward context: max_tokens, max_seqs and max_logit_rows must be >= 1");
  }
  logits_.assign(static_cast<size_t>(options.max_logit_rows * n_vocab_), 0.0f);
  seq_logit_offset_.assign(options.max_seqs, 0);
  seq_logit_count_.assign(options.max_seqs, 0);
}

std::span<const float> VulkanContext::logits(int s) const {
  if (s < 0 || s >= static_cast<int>(seq_logit_count_.size()))
    Fail("logits: no sequence {} in the last pass", s);
  return {logits_.data() + seq_logit_offset_[s] * n_vocab_,
          static_cast<size_t>(seq_logit_count_[s] * n_vocab_)};
}

int64_t VulkanContext::n_logit_rows(int s) const {
  if (s < 0 || s >= static_cast<int>(seq_logit_count_.size()))
    Fail("logits: no sequence {} in the last pass", s);
  return seq_logit_count_[s];
}

std::unique_ptr<model::ForwardContext> VulkanExecutor::NewContext(
    const model::ContextOptions& options) const {
  return std::make_unique<VulkanContext>(*this, options);
}

// ---------------------------------------------------------------------------------------------
// Forward.

CommandList& VulkanExecutor::ListFor(DeviceState& st, int64_t T, PassKind kind, LogitRows rows,
                                     bool record, uint64_t skip_ffn) const {
  const DeviceState::Key key{
      T,       static_cast<int>(kind), static_cast<int>(rows), record ? 1 : 0, profile_ ? 1 : 0,
      skip_ffn};
  auto it = st.lists_.find(key);
  if (it != st.lists_.end()) return *it->second;
  if (static_cast<int>(st.lists_.size()) >= options_.max_recorded_shapes) {
    st.lists_.erase(st.list_order_.front());
    st.list_order_.erase(st.list_order_.begin());
  }
  auto cl = std::make_unique<CommandList>(device_);
  OpConfig ops = options_.ops;
  ops.profile = profile_;
  cl->Begin(st.params_, ops);
  RecordPass(*cl, st, T, kind, rows, record, skip_ffn);
  cl->End();
  st.list_order_.push_back(key);
  return *st.lists_.emplace(key, std::move(cl)).first->second;
}

void VulkanExecutor::RunChunk(DeviceState& st, std::span<const int32_t> tokens, PassKind kind,
                              LogitRows rows, bool record, float* logits_out,
                              uint64_t skip_ffn) const {
  const int64_t T = static_cast<int64_t>(tokens.size());
  CommandList& cl = ListFor(st, T, kind, rows, record, skip_ffn);
  reinterpret_cast<int32_t*>(st.params_.host)[0] = static_cast<int32_t>(st.n_past());
  std::memcpy(s_->ids.host, tokens.data(), tokens.size_bytes());
  st.NoteKvWrite(st.n_past(), T);
  cl.Run();
  last_dispatches_ = cl.dispatch_count();
  last_barriers_ = cl.barrier_count();
  if (profile_) last_profile_ = cl.Profile();
  const int64_t n = model::LogitRowCount(rows, T);
  if (n > 0) {
    std::memcpy(logits_out, s_->logits.host,
                static_cast<size_t>(n * hparams().n_vocab) * sizeof(float));
  }
  if (kind == PassKind::kCausal) st.Advance(T, record);
}

void VulkanExecutor::Forward(std::span<const model::SequenceInput> seqs,
                             model::ForwardContext& ctx_base,
                             model::ForwardObserver* observer) const {
  Check(n_layers_ == hparams().n_layer,
        "vulkan: this executor runs {} of {} layers (a split); use the split executor", n_layers_,
        hparams().n_layer);
  model::ValidateBatch(*this, seqs, ctx_base);
  Check(observer == nullptr,
        "vulkan: forward observers (named intermediates) are not supported by this executor yet; "
        "use --device cpu to dump intermediates");
  auto& ctx = static_cast<VulkanContext&>(ctx_base);
  const int64_t max_T = options_.max_tokens;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t T = static_cast<int64_t>(seqs[s].tokens.size());
    if (seqs[s].kind == PassKind::kDenoise && T > max_T) {
      Fail("forward: a denoise block of {} tokens exceeds the GPU pass size {}", T, max_T);
    }
  }
  const int64_t V = hparams().n_vocab;
  std::fill(ctx.seq_logit_count_.begin(), ctx.seq_logit_count_.end(), 0);
  int64_t row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const model::SequenceInput& in = seqs[s];
    auto& st = static_cast<DeviceState&>(*in.state);
    const int64_t T = static_cast<int64_t>(in.tokens.size());
    ctx.seq_logit_offset_[s] = row;
    for (int64_t at = 0; at < T; at += max_T) {
      const int64_t n = std::min(max_T, T - at);
      LogitRows r = in.logits;
      if (r == LogitRows::kLast && at + n < T) r = LogitRows::kNone;
      RunChunk(st, in.tokens.subspan(at, n), in.kind, r, in.record, ctx.logits_.data() + row * V,
               in.skip_ffn_layers);
      row += model::LogitRowCount(r, n);
    }
    ctx.seq_logit_count_[s] = row - ctx.seq_logit_offset_[s];
  }
}

void VulkanExecutor::ForwardHidden(model::SequenceState& st_base, std::span<const int32_t> tokens,
                                   PassKind kind, bool record, float* hidden) const {
  auto* st = dynamic_cast<DeviceState*>(&st_base);
  Check(st != nullptr && &st->exec_ == this,
        "vulkan: ForwardHidden with a state of another executor");
  const int64_t T = static_cast<int64_t>(tokens.size());
  Check(T >= 1 && T <= options_.max_tokens && st->n_past() + T <= st->n_ctx() &&
            (!record || T <= st->max_record_tokens()),
        "vulkan: ForwardHidden of {} tokens at {} (pass size {}, n_ctx {})", T, st->n_past(),
        options_.max_tokens, st->n_ctx());
  for (int32_t t : tokens) {
    Check(t >= 0 && t < hparams().n_vocab, "forward: token id {} is outside the vocabulary", t);
  }
  RunChunk(*st, tokens, kind, LogitRows::kNone, record, nullptr);
  std::memcpy(hidden, s_->hidden.host, sizeof(float) * static_cast<size_t>(T * hparams().n_embd));
}

}  // namespace crossword::vulkan
