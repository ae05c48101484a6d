// The qwen35moe / clover_moe tensor table and its helpers.
#include "model/schema.h"

#include <fmt/format.h>

#include <charconv>

namespace crossword::model {
namespace {

using D = Dim;
using L = LayerWeights;
constexpr auto kG = TensorScope::kGlobal, kAll = TensorScope::kEveryLayer,
               kAtt = TensorScope::kAttention, kRec = TensorScope::kRecurrent;
constexpr auto kReq = Presence::kRequired, kShared = Presence::kSharedExpert,
               kDiff = Presence::kDiffusionOnly;

constexpr TensorSpec Mat(std::string_view n, TensorScope s, Presence p, D in, D out,
                         kernels::Matrix L::*m) {
  return {n, s, p, Storage::kMatrix, {in, out, D::kOne}, m, nullptr, nullptr};
}
constexpr TensorSpec Exp(std::string_view n, D in, D out, ExpertTensor L::*e) {
  return {n, kAll, kReq, Storage::kExperts, {in, out, D::kExpert}, nullptr, e, nullptr};
}
constexpr TensorSpec Vec(std::string_view n, TensorScope s, Presence p, D d0, D d1,
                         std::vector<float> L::*v) {
  return {n, s, p, Storage::kVector, {d0, d1, D::kOne}, nullptr, nullptr, v};
}
constexpr TensorSpec Unused(std::string_view n, D d0, D d1) {
  return {n, kRec, kDiff, Storage::kUnused, {d0, d1, D::kOne}, nullptr, nullptr, nullptr};
}

constexpr TensorSpec kQwen35Moe[] = {
    {"token_embd.weight", kG, kReq, Storage::kRows, {D::kEmbd, D::kVocab, D::kOne}},
    Vec("attn_norm.weight", kAll, kReq, D::kEmbd, D::kOne, &L::attn_norm),
    // Gated DeltaNet.
    Mat("attn_qkv.weight", kRec, kReq, D::kEmbd, D::kConvDim, &L::attn_qkv),
    Mat("attn_gate.weight", kRec, kReq, D::kEmbd, D::kDInner, &L::attn_gate),
    Vec("ssm_conv1d.weight", kRec, kReq, D::kConvKernel, D::kConvDim, &L::ssm_conv1d),
    Vec("ssm_dt.bias", kRec, kReq, D::kVHeads, D::kOne, &L::ssm_dt_bias),
    Vec("ssm_a", kRec, kReq, D::kVHeads, D::kOne, &L::ssm_a),
    Mat("ssm_beta.weight", kRec, kReq, D::kEmbd, D::kVHeads, &L::ssm_beta),
    Mat("ssm_alpha.weight", kRec, kReq, D::kEmbd, D::kVHeads, &L::ssm_alpha),
    Vec("ssm_norm.weight", kRec, kReq, D::kDState, D::kOne, &L::ssm_norm),
    Mat("ssm_out.weight", kRec, kReq, D::kDInner, D::kEmbd, &L::ssm_out),
    // The official file's diffusion-only GDN tensors (stand-in shapes, see Presence).
    Unused("ssm_bd_history.weight", D::kEmbd, D::kVHeads),
    Unused("ssm_bd_history.bias", D::kVHeads, D::kOne),
    Unused("ssm_bd_logit_scale.weight", D::kVHeads, D::kOne),
    Unused("ssm_conv1d.weight_right", D::kConvKernel, D::kConvDim),
    // Gated attention.
    Mat("attn_q.weight", kAtt, kReq, D::kEmbd, D::kQGate, &L::attn_q),
    Mat("attn_k.weight", kAtt, kReq, D::kEmbd, D::kKvDim, &L::attn_k),
    Mat("attn_v.weight", kAtt, kReq, D::kEmbd, D::kKvDim, &L::attn_v),
    Mat("attn_output.weight", kAtt, kReq, D::kQDim, D::kEmbd, &L::attn_output),
    Vec("attn_q_norm.weight", kAtt, kReq, D::kHeadDim, D::kOne, &L::attn_q_norm),
    Vec("attn_k_norm.weight", kAtt, kReq, D::kHeadDim, D::kOne, &L::attn_k_norm),
    // Mixture of experts.
    Vec("post_attention_norm.weight", kAll, kReq, D::kEmbd, D::kOne, &L::post_attention_norm),
    Mat("ffn_gate_inp.weight", kAll, kReq, D::kEmbd, D::kExpert, &L::ffn_gate_inp),
    Exp("ffn_gate_exps.weight", D::kEmbd, D::kFfExp, &L::ffn_gate_exps),
    Exp("ffn_up_exps.weight", D::kEmbd, D::kFfExp, &L::ffn_up_exps),
    Exp("ffn_down_exps.weight", D::kFfExp, D::kEmbd, &L::ffn_down_exps),
    Vec("ffn_gate_inp_shexp.weight", kAll, kShared, D::kEmbd, D::kOne, &L::ffn_gate_inp_shexp),
    Mat("ffn_gate_shexp.weight", kAll, kShared, D::kEmbd, D::kFfShexp, &L::ffn_gate_shexp),
    Mat("ffn_up_shexp.weight", kAll, kShared, D::kEmbd, D::kFfShexp, &L::ffn_up_shexp),
    Mat("ffn_down_shexp.weight", kAll, kShared, D::kFfShexp, D::kEmbd, &L::ffn_down_shexp),
    // Output head.
    {"output_norm.weight", kG, kReq, Storage::kVector, {D::kEmbd, D::kOne, D::kOne}},
    {"output.weight", kG, Presence::kOptional, Storage::kMatrix, {D::kEmbd, D::kVocab, D::kOne}},
};

}  // namespace

int64_t DimValue(Dim d, const Hparams& hp) {
  switch (d) {
    case Dim::kOne:
      return 1;
    case Dim::kEmbd:
      return hp.n_embd;
    case Dim::kVocab:
      return hp.n_vocab;
    case Dim::kHeadDim:
      return hp.head_dim;
    case Dim::kQGate:
      return 2 * static_cast<int64_t>(hp.n_head) * hp.head_dim;
    case Dim::kQDim:
      return static_cast<int64_t>(hp.n_head) * hp.head_dim;
    case Dim::kKvDim:
      return static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
    case Dim::kConvDim:
      return hp.conv_dim();
    case Dim::kDInner:
      return hp.ssm_d_inner;
    case Dim::kVHeads:
      return hp.ssm_n_v_heads;
    case Dim::kDState:
      return hp.ssm_d_state;
    case Dim::kConvKernel:
      return hp.ssm_d_conv;
    case Dim::kExpert:
      return hp.n_expert;
    case Dim::kFfExp:
      return hp.n_ff_exp;
    case Dim::kFfShexp:
      return hp.n_ff_shexp;
  }
  return 0;
}

std::string_view DimName(Dim d) {
  switch (d) {
    case Dim::kOne:
      return "1";
    case Dim::kEmbd:
      return "n_embd";
    case Dim::kVocab:
      return "n_vocab";
    case Dim::kHeadDim:
      return "head_dim";
    case Dim::kQGate:
      return "2*n_head*head_dim";
    case Dim::kQDim:
      return "n_head*head_dim";
    case Dim::kKvDim:
      return "n_head_kv*head_dim";
    case Dim::kConvDim:
      return "conv_dim";
    case Dim::kDInner:
      return "ssm_d_inner";
    case Dim::kVHeads:
      return "ssm_n_v_heads";
    case Dim::kDState:
      return "ssm_d_state";
    case Dim::kConvKernel:
      return "ssm_d_conv";
    case Dim::kExpert:
      return "n_expert";
    case Dim::kFfExp:
      return "n_ff_exp";
    case Dim::kFfShexp:
      return "n_ff_shexp";
  }
  return "?";
}

bool TensorSpec::InLayer(LayerKind kind) const {
  switch (scope) {
    case TensorScope::kGlobal:
      return false;
    case TensorScope::kEveryLayer:
      return true;
    case TensorScope::kAttention:
      return kind == LayerKind::kAttention;
    case TensorScope::kRecurrent:
      return kind == LayerKind::kRecurrent;
  }
  return false;
}

std::string TensorSpec::FullName(int layer) const {
  return layer >= 0 ? fmt::format("blk.{}.{}", layer, name) : std::string(name);
}

std::vector<int64_t> TensorSpec::Shape(const Hparams& hp) const {
  std::vector<int64_t> out;
  for (Dim d : ne) out.push_back(DimValue(d, hp));
  while (out.size() > 1 && ne[out.size() - 1] == Dim::kOne) out.pop_back();
  return out;
}

std::span<const TensorSpec> Qwen35MoeSchema() { return kQwen35Moe; }

const TensorSpec* FindTensorSpec(std::string_view name, int* layer) {
  *layer = -1;
  std::string_view rest = name;
  if (name.starts_with("blk.")) {
    const char* begin = name.data() + 4;
    const char* end = name.data() + name.size();
    int il = 0;
    auto [p, ec] = std::from_chars(begin, end, il);
    if (ec != std::errc() || p == end || *p != '.') return nullptr;
    *layer = il;
    rest = std::string_view(p + 1, static_cast<size_t>(end - p - 1));
  }
  for (const TensorSpec& s : kQwen35Moe) {
    if (s.name == rest && (s.scope == TensorScope::kGlobal) == (*layer < 0)) return &s;
  }
  *layer = -1;
  return nullptr;
}

}  // namespace crossword::model
