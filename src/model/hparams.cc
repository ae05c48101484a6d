// ReadHparams: metadata -> Hparams with every consistency check done once, at load.
#include "model/hparams.h"

#include <fmt/format.h>

#include "base/error.h"

namespace crossword::model {
namespace {

class KeyReader {
 public:
  KeyReader(const gguf::File& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  std::string Key(std::string_view name) const { return prefix_ + "." + std::string(name); }

  int64_t Positive(std::string_view name) const {
    const std::string key = Key(name);
    auto v = file_.GetUint(key);
    if (!v)
      Fail("{}: key '{}' not found; this file is not a complete {} model", file_.path(), key,
           prefix_);
    if (*v == 0 || *v > (uint64_t{1} << 40)) {
      Fail("{}: key '{}' = {} is out of range (expected a positive size)", file_.path(), key, *v);
    }
    return static_cast<int64_t>(*v);
  }
  std::optional<int64_t> OptionalUint(std::string_view name) const {
    auto v = file_.GetUint(Key(name));
    if (!v) return std::nullopt;
    return static_cast<int64_t>(*v);
  }
  std::optional<double> OptionalFloat(std::string_view name) const {
    return file_.GetFloat(Key(name));
  }

 private:
  const gguf::File& file_;
  std::string prefix_;
};

}  // namespace

int Hparams::n_recurrent() const {
  int n = 0;
  for (LayerKind k : layer_kinds) n += k == LayerKind::kRecurrent;
  return n;
}
int Hparams::n_attention() const { return n_layer - n_recurrent(); }

Hparams ReadHparams(const gguf::File& file, const Logger& logger) {
  Hparams hp;
  hp.arch = std::string(file.architecture());
  if (hp.arch != "clover_moe" && hp.arch != "qwen35moe") {
    Fail("{}: general.architecture is '{}'; crossword runs 'clover_moe' and 'qwen35moe' files",
         file.path(), hp.arch.empty() ? "(missing)" : hp.arch);
  }
  const KeyReader k(file, hp.arch);
  const std::string& path = file.path();

  hp.n_ctx_train = k.Positive("context_length");
  hp.n_embd = k.Positive("embedding_length");
  const int64_t block_count = k.Positive("block_count");
  hp.n_layer_nextn = static_cast<int>(k.OptionalUint("nextn_predict_layers").value_or(0));
  if (hp.n_layer_nextn >= block_count) {
    Fail("{}: {}.nextn_predict_layers = {} leaves no trunk layers (block_count = {})", path,
         hp.arch, hp.n_layer_nextn, block_count);
  }
  hp.n_layer = static_cast<int>(block_count - hp.n_layer_nextn);

  hp.n_head = static_cast<int>(k.Positive("attention.head_count"));
  hp.n_head_kv = static_cast<int>(k.Positive("attention.head_count_kv"));
  hp.head_dim = k.Positive("attention.key_length");
  const int64_t value_length = k.OptionalUint("attention.value_length").value_or(hp.head_dim);
  if (value_length != hp.head_dim) {
    Fail(
        "{}: attention.value_length {} != key_length {}; crossword needs equal key and value heads",
        path, value_length, hp.head_dim);
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    Fail("{}: attention.head_count {} is not a multiple of head_count_kv {}", path, hp.n_head,
         hp.n_head_kv);
  }
  hp.rms_eps =
      static_cast<float>(k.OptionalFloat("attention.layer_norm_rms_epsilon").value_or(1e-6));
  if (!(hp.rms_eps > 0.0f) || hp.rms_eps > 1.0f)
    Fail("{}: layer_norm_rms_epsilon {} is not in (0, 1]", path, hp.rms_eps);

  hp.n_rot = static_cast<int>(k.Positive("rope.dimension_count"));
  if (hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim) {
    Fail("{}: rope.dimension_count {} must be even and <= key_length {}", path, hp.n_rot,
         hp.head_dim);
  }
  if (const gguf::Value* sec = file.Find(k.Key("rope.dimension_sections"))) {
    auto v = sec->Int32Array();
    if (!v || v->size() > 4)
      Fail("{}: {} must be an int array of at most 4 entries", path,
           k.Key("rope.dimension_sections"));
    for (size_t i = 0; i < v->size(); ++i) hp.rope_sections[i] = (*v)[i];
  }
  hp.rope_freq_base = static_cast<float>(k.OptionalFloat("rope.freq_base").value_or(10000.0));
  if (!(hp.rope_freq_base > 1.0f))
    Fail("{}: rope.freq_base {} must be > 1", path, hp.rope_freq_base);

  hp.ssm_d_conv = static_cast<int>(k.Positive("ssm.conv_kernel"));
  hp.ssm_d_state = k.Positive("ssm.state_size");
  hp.ssm_n_k_heads = static_cast<int>(k.Positive("ssm.group_count"));
  hp.ssm_n_v_heads = static_cast<int>(k.Positive("ssm.time_step_rank"));
  hp.ssm_d_inner = k.Positive("ssm.inner_size");
  if (hp.ssm_d_inner != hp.ssm_n_v_heads * hp.ssm_d_state) {
    Fail("{}: ssm.inner_size {} != ssm.time_step_rank {} x ssm.state_size {}", path, hp.ssm_d_inner,
         hp.ssm_n_v_heads, hp.ssm_d_state);
  }
  if (hp.ssm_n_v_heads % hp.ssm_n_k_heads != 0) {
    Fail(
        "{}: ssm.time_step_rank {} (value heads) is not a multiple of ssm.group_count {} (key "
        "heads)",
        path, hp.ssm_n_v_heads, hp.ssm_n_k_heads);
  }
  if (hp.ssm_d_conv < 2 || hp.ssm_d_conv > 16)
    Fail("{}: ssm.conv_kernel {} is not in [2, 16]", path, hp.ssm_d_conv);
  if (hp.ssm_d_state > 256)
    Fail("{}: ssm.state_size {} exceeds 256 (kernel limit)", path, hp.ssm_d_state);
  if (hp.head_dim > 512)
    Fail("{}: attention.key_length {} exceeds 512 (kernel limit)", path, hp.head_dim);

  hp.layer_kinds.assign(hp.n_layer, LayerKind::kAttention);
  const std::string rec_key = k.Key("attention.recurrent_layers");
  if (const gguf::Value* rec = file.Find(rec_key)) {
    auto as_bool = rec->BoolArray();
    auto as_int = rec->IntArray();
    size_t n = as_bool ? as_bool->size() : as_int ? as_int->size() : 0;
    if (n < static_cast<size_t>(hp.n_layer)) {
      Fail("{}: {} must be a bool/int array with one entry per layer ({} needed)", path, rec_key,
           hp.n_layer);
    }
    for (int il = 0; il < hp.n_layer; ++il)
      hp.layer_kinds[il] = (as_bool ? (*as_bool)[il] : (*as_int)[il] != 0) ? LayerKind::kRecurrent
                                                                           : LayerKind::kAttention;
  } else {
    const int64_t interval = k.OptionalUint("full_attention_interval").value_or(4);
    if (interval < 1) Fail("{}: full_attention_interval must be >= 1", path);
    for (int il = 0; il < hp.n_layer; ++il)
      hp.layer_kinds[il] = (il + 1) % interval != 0 ? LayerKind::kRecurrent : LayerKind::kAttention;
  }

  hp.n_expert = static_cast<int>(k.Positive("expert_count"));
  hp.n_expert_used = static_cast<int>(k.Positive("expert_used_count"));
  if (hp.n_expert_used > hp.n_expert || hp.n_expert > 1024) {
    Fail("{}: expert_used_count {} must be <= expert_count {} (<= 1024)", path, hp.n_expert_used,
         hp.n_expert);
  }
  hp.n_ff_exp = k.Positive("expert_feed_forward_length");
  hp.n_ff_shexp = k.OptionalUint("expert_shared_feed_forward_length").value_or(0);
  if (auto shared = k.OptionalUint("expert_shared_count")) {
    hp.n_expert_shared = static_cast<int>(*shared);
    hp.expert_shared_count_present = true;
  } else {
    hp.n_expert_shared = 1;
    // Debug only: the load's one layout line (weights.cc) already reports it.
    logger.Debug("{}: key {}.expert_shared_count is absent (Clover's official layout); using 1",
                 path, hp.arch);
  }
  if (hp.n_expert_shared > 1)
    Fail("{}: expert_shared_count {} > 1 is not supported", path, hp.n_expert_shared);
  if (hp.n_expert_shared == 1 && hp.n_ff_shexp == 0) {
    Fail("{}: a shared expert is declared but {}.expert_shared_feed_forward_length is missing",
         path, hp.arch);
  }

  if (auto b = k.OptionalUint("diffusion.block_size")) {
    if (*b < 2 || *b > 256)
      Fail("{}: {}.diffusion.block_size {} is not in [2, 256]", path, hp.arch, *b);
    hp.diffusion_block_size = static_cast<int>(*b);
  }
  if (auto t = k.OptionalFloat("diffusion.threshold")) {
    if (!(*t > 0.0 && *t <= 1.0))
      Fail("{}: {}.diffusion.threshold {} is not in (0, 1]", path, hp.arch, *t);
    hp.diffusion_threshold = static_cast<float>(*t);
  }
  if (auto s = file.GetBool(k.Key("diffusion.shift_logits"))) hp.diffusion_shift_logits = *s;

  // The vocabulary size comes from the token list when present, else from the embedding.
  if (const gguf::Value* toks = file.Find("tokenizer.ggml.tokens"))
    hp.n_vocab = static_cast<int64_t>(toks->array_size());
  return hp;
}

}  // namespace crossword::model
