// The engine bundle: a loaded model with its tokenizer, chat template, thread pool and the
// decoding defaults derived from the file; what `run`, `check`, `serve` and `bench` build on.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/mapped_file.h"
#include "chat/template.h"
#include "decode/generation.h"
#include "grammar/matcher.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace crossword::engine {

/// Spec-mode defaults (llama.cpp's --draft-max / --draft-p-min; docs/decoding.md).
inline constexpr int kDefaultDraftMax = 15;
inline constexpr float kDefaultDraftPMin = 0.0f;
/// Spec drafts of the tiny trained model (general.name "clover-tiny", the embedded default) skip
/// the FFN blocks of layers 2, 3 and 4 (DecodeParams::draft_skip_ffn): measured on its held-out
/// questions, 4.76 tokens per pass against 4.85 with every layer, for a draft pass ~15 % cheaper
/// (docs/decoding.md, "Draft passes that skip FFN blocks"). Other models have no measured set and
/// draft with every layer unless --draft-skip-ffn says otherwise.
inline constexpr uint64_t kTinyDraftSkipFfn = 0b11100;

struct EngineOptions {
  std::string model_path;       ///< empty: the embedded default model (if this build has one)
  MapOptions map;               ///< --no-mmap / --mlock
  bool repack = true;           ///< --no-repack: no tile copy of quantized weights (CPU executor)
  int threads = 0;              ///< 0: all hardware threads; at most 4 per hardware thread
  std::string device = "auto";  ///< --device: executor by registry name (backends/registry.h)
  int n_gpu_layers = -1;        ///< -ngl / --n-gpu-layers: layers on the GPU (-1: all)
  Logger logger;
  /// Jinja chat template text used instead of the file's tokenizer.chat_template (serve's
  /// --chat-template / --chat-template-file); empty: the file's.
  std::string chat_template;
};

/// The bytes of the model embedded into this binary at build time (models/clover-tiny.gguf),
/// or an empty span when the build has none.
std::span<const std::byte> EmbeddedModel();

/// A loaded model + tokenizer + chat template + the executor that runs its forward passes.
/// Immutable after Load; callers share the executor by taking turns (one forward pass or
/// RollbackTo at a time).
class Engine {
 public:
  /// Loads the file (or the embedded model). Throws crossword::Error with the file's problem,
  /// or when `threads` exceeds 4 per hardware thread (above 1 per hardware thread: a warning).
  static std::unique_ptr<Engine> Load(const EngineOptions& options);

  const model::Model& model() const { return *model_; }
  /// The executor of this engine's forward passes (picked by EngineOptions::device).
  const model::Executor& executor() const { return *executor_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  /// The file's tokenizer.chat_template, or nullptr when it has none.
  const chat::Template* chat_template() const { return template_.get(); }
  const Logger& logger() const { return logger_; }
  /// Seconds spent in Load.
  double load_seconds() const { return load_seconds_; }
  /// "path" or "(embedded) clover-tiny".
  const std::string& model_name() const { return name_; }

  /// Renders a conversation with the chat template (HF variables; `kwargs` such as
  /// {"enable_thinking": false} are merged on top). Throws chat::TemplateException for a
  /// template's raise_exception, crossword::Error when the model has no template.
  std::string RenderChat(const nlohmann::ordered_json& messages,
                         const nlohmann::ordered_json& tools, const nlohmann::ordered_json& kwargs,
                         bool add_generation_prompt = true) const;

  /// A rendered chat prompt and its token ids. Text that came from the caller's messages or tools
  /// never becomes a CONTROL token (`<|im_end|>` typed by a user stays plain text); only the
  /// template's own markup does. Method: control-token texts inside caller strings are swapped for
  /// private-use markers before rendering, and tokenized as plain text afterwards.
  struct ChatPrompt {
    std::string text;  ///< the rendered prompt (with the caller's text restored)
    std::vector<int32_t> tokens;
    bool think_open = false;  ///< the prompt ends inside an open <think> block
  };
  /// `continue_final`: the prompt ends right after the final message's content (no end of turn),
  /// so the answer continues it (assistant prefill); needs add_generation_prompt false and a
  /// final message with text. Throws crossword::Error when the template drops that text.
  ChatPrompt EncodeChat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                        const nlohmann::ordered_json& kwargs, bool add_generation_prompt = true,
                        bool continue_final = false) const;
  /// Whether `tokens` leave a <think> block open (last <think> after the last </think>).
  bool ThinkOpen(std::span<const int32_t> tokens) const;

  /// Decoding defaults of this model: mode AR, block size / threshold from the file, Clover's
  /// sampling defaults for clover_moe (presence 0.9, repetition 1.05), EOG / mask / think ids from
  /// the tokenizer, Clover's long-generation biases on for clover_moe, spec drafts of at most
  /// kDefaultDraftMax tokens with verify cut kDefaultDraftPMin.
  decode::DecodeParams DefaultDecodeParams() const;

  /// A state for one sequence of `n_ctx` tokens that can run every decoding mode.
  std::unique_ptr<model::SequenceState> NewState(int64_t n_ctx,
                                                 GgmlType kv_type = GgmlType::kF16) const;

  /// The tokenizer's vocabulary as grammars see it (token bytes; CONTROL and UNUSED tokens never
  /// allowed; the end-of-generation ids allowed where a grammar ends). Built on first use
  /// (engine/structured.cc), then shared; thread-safe.
  std::shared_ptr<const grammar::TokenVocabulary> GrammarVocabulary() const;
  /// Compiles GBNF text for this model, cached by text (the last kGrammarCacheEntries), so a
  /// repeated schema costs nothing and keeps its per-state token classes. With
  /// `leading_whitespace`, up to 4 spaces or newlines may come first (an answer after the
  /// reasoning's `</think>`). Thread-safe. Throws grammar::GrammarError (a 400 for a server).
  std::shared_ptr<const grammar::CompiledGrammar> CompileGrammar(
      const std::string& gbnf, bool leading_whitespace = false,
      const grammar::GrammarLimits& limits = {}) const;
  static constexpr size_t kGrammarCacheEntries = 32;

 private:
  Engine() = default;
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<model::Executor> executor_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<chat::Template> template_;
  Logger logger_;
  double load_seconds_ = 0;
  std::string name_;
  std::vector<std::string> control_texts_;  // CONTROL token texts, longest first
  mutable std::once_flag vocab_once_;
  mutable std::shared_ptr<const grammar::TokenVocabulary> vocab_;
  mutable std::mutex grammar_mu_;
  mutable std::list<std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>>
      grammar_cache_;  // most recently used first
};

/// Optional hooks of RunGeneration.
struct RunHooks {
  /// After each prefill pass: prompt tokens evaluated so far and in all by this generation (a
  /// prefix already in the state is not counted). Called from the generating thread.
  std::function<void(int64_t done, int64_t total)> on_prefill;
  /// Polled before each forward pass: true ends the generation there (FinishReason kCancelled),
  /// e.g. Ctrl-C; prefill stops between chunks.
  std::function<bool()> stop;
};

/// Runs one generation to completion on `state` with a private forward context (single
/// sequence). The sink sees each token as it is emitted.
decode::Generation RunGeneration(const Engine& engine, model::SequenceState& state,
                                 std::vector<int32_t> prompt, const decode::DecodeParams& params,
                                 decode::TokenSink sink, const RunHooks& hooks = {});

}  // namespace crossword::engine
