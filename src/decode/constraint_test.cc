// Constrained decoding on a random-weight model (its logits are arbitrary, so the grammar does
// all the work): in every mode, greedy and sampled, each emitted token keeps the output in the
// grammar's language and a stop ends it where the grammar can end; spec equals constrained AR
// (greedy); the reasoning gate; the Draw helper.
#include <gtest/gtest.h>

#include "backends/cpu/executor.h"
#include "decode/generation.h"
#include "grammar/json_schema.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tools/synth.h"

namespace crossword::decode {
namespace {

struct Fixture {
  std::shared_ptr<const model::Model> model;
  std::unique_ptr<model::Executor> exec;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::shared_ptr<const grammar::TokenVocabulary> vocab;

  Fixture() {
    const std::string path =
        tools::SynthesizeOnce({.preset = "tiny",
                               .type = "F32",
                               .layout = "official",
                               .arch = "clover_moe",
                               .seed = 5,
                               .output = ::testing::TempDir() + "/constraint_tiny.gguf",
                               .threads = 2});
    model::LoadOptions lo;
    lo.logger = Logger::Silent();
    model = model::Model::Load(path, lo);
    exec = std::make_unique<backends::cpu::CpuExecutor>(
        model, backends::cpu::CpuOptions{.threads = 2, .repack = true, .logger = Logger::Silent()});
    tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::FromGguf(model->file()));
    std::vector<std::string> bytes;
    std::vector<int32_t> excluded;
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
      bytes.emplace_back(tok->TokenBytes(id));
      const auto t = tok->GetTokenType(id);
      if (t == tokenizer::TokenType::kControl || t == tokenizer::TokenType::kUnused) {
        excluded.push_back(id);
      }
    }
    vocab = std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), excluded,
                                                             tok->eog_ids());
  }

  std::shared_ptr<const grammar::CompiledGrammar> Compile(const std::string& gbnf) const {
    grammar::GrammarLimits limits;
    limits.max_text_bytes = 4 << 20;
    limits.max_nesting = 256;
    return std::make_shared<const grammar::CompiledGrammar>(
        grammar::CompileGrammar(grammar::ParseGbnf(gbnf, limits), limits), vocab);
  }

  DecodeParams Params(Mode mode, std::shared_ptr<const grammar::CompiledGrammar> g) const {
    DecodeParams p;
    p.mode = mode;
    p.block_size = 8;
    p.threshold = 0.5f;
    p.max_tokens = 160;
    p.eog_ids.assign(tok->eog_ids().begin(), tok->eog_ids().end());
    p.mask_id = tok->special().mask.value_or(-1);
    p.think_end_id = tok->special().think_end.value_or(-1);
    p.grammar = std::move(g);
    return p;
  }

  Generation Run(const std::vector<int32_t>& prompt, const DecodeParams& p) const {
    model::StateOptions so;
    so.n_ctx = 1024;
    so.max_record_tokens = 64;
    auto st = exec->NewState(so);
    model::ContextOptions co;
    co.max_tokens = 256;
    co.max_logit_rows = 64;
    auto ctx_owner = exec->NewContext(co);
    model::ForwardContext& ctx = *ctx_owner;
    Generation g(*model, *st, prompt, p, nullptr);
    while (!g.done()) {
      model::SequenceInput in = g.NextInput();
      exec->Forward({&in, 1}, ctx);
      DeliverLogits(g, ctx, 0);
    }
    states.push_back(std::move(st));  // Generation refers to it
    return g;
  }
  mutable std::vector<std::unique_ptr<model::SequenceState>> states;
};

const Fixture& F() {
  static const Fixture f;
  return f;
}

// The output replayed through a fresh matcher: every token accepted; a stop only where the
// grammar can end.
void ExpectInLanguage(const std::shared_ptr<const grammar::CompiledGrammar>& g,
                      const Generation& gen, const std::string& what) {
  grammar::Matcher m(g);
  for (int32_t t : gen.output()) {
    ASSERT_TRUE(m.Accept(t)) << what << ": token " << t << " ('" << F().tok->TokenBytes(t)
                             << "') left the language after '" << F().tok->Decode(gen.output())
                             << "'";
  }
  if (gen.finish_reason() == FinishReason::kStop) {
    EXPECT_TRUE(m.CanEnd()) << what
                            << ": stopped inside the grammar: " << F().tok->Decode(gen.output());
  }
}

const char* kSchema = R"({"type": "object", "properties": {
    "id": {"type": "integer", "minimum": -5, "maximum": 250},
    "tag": {"enum": ["red", "green", "blue"]},
    "name": {"type": "string", "maxLength": 6},
    "list": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    "sub": {"type": "object", "properties": {"ok": {"type": "null"}}, "required": ["ok"],
            "additionalProperties": false}},
    "required": ["id", "tag", "list"], "additionalProperties": false})";

const char* kRecursive = R"(root ::= "[" (item ("," item)*)? "]"
item ::= [0-9]{1,3} | root
)";

std::vector<std::vector<int32_t>> Prompts() {
  return {{1, 2, 3, 4, 5}, {100, 200, 300}, {42}, {7, 7, 7, 7, 7, 7, 7, 7, 9}};
}

TEST(Constrained, EveryModeStaysInTheLanguage) {
  const Fixture& f = F();
  int finished = 0, runs = 0;
  for (const std::string& gbnf :
       {grammar::JsonSchemaToGbnf(std::string_view(kSchema)), std::string(kRecursive)}) {
    auto g = f.Compile(gbnf);
    for (Mode mode : {Mode::kAr, Mode::kDiffusion, Mode::kSpec}) {
      for (float temp : {0.0f, 1.0f}) {
        for (const auto& prompt : Prompts()) {
          DecodeParams p = f.Params(mode, g);
          p.sampling.temperature = temp;
          p.sampling.seed = 11;
          Generation gen = f.Run(prompt, p);
          ExpectInLanguage(g, gen, fmt::format("{} temp {}", ModeName(mode), temp));
          finished += gen.finish_reason() == FinishReason::kStop;
          ++runs;
          EXPECT_GT(gen.stats().grammar_masks, 0);
        }
      }
    }
  }
  // Random logits still end most answers: the grammar closes what it opened.
  EXPECT_GT(finished, runs / 3);
}

TEST(Constrained, SpecEqualsConstrainedArGreedy) {
  const Fixture& f = F();
  for (const std::string& gbnf :
       {grammar::JsonSchemaToGbnf(std::string_view(kSchema)), std::string(kRecursive)}) {
    auto g = f.Compile(gbnf);
    for (const auto& prompt : Prompts()) {
      const std::vector<int32_t> ar = f.Run(prompt, f.Params(Mode::kAr, g)).output();
      for (int block : {4, 8, 16}) {
        for (float p_min : {0.0f, 0.3f}) {
          DecodeParams p = f.Params(Mode::kSpec, g);
          p.block_size = block;
          p.draft_p_min = p_min;
          EXPECT_EQ(f.Run(prompt, p).output(), ar) << "block " << block << " p_min " << p_min;
        }
      }
    }
  }
}

TEST(Constrained, ReasoningIsFreeUntilThinkEndAndCannotEndInside) {
  const Fixture& f = F();
  auto g = f.Compile(grammar::JsonSchemaToGbnf(std::string_view(kSchema)));
  const int32_t think_end = f.tok->special().think_end.value();
  const int32_t eos = f.tok->eog_ids()[0];
  for (Mode mode : {Mode::kAr, Mode::kDiffusion, Mode::kSpec}) {
    DecodeParams p = f.Params(mode, g);
    p.think_open = true;
    // Ending is the model's favourite, then closing the reasoning: the gate forbids the first.
    p.sampling.logit_bias = {{eos, 100.0f}, {think_end, 50.0f}};
    Generation gen = f.Run({1, 2, 3}, p);
    ASSERT_FALSE(gen.output().empty());
    EXPECT_EQ(gen.output()[0], think_end) << ModeName(mode);
    grammar::Matcher m(g);
    for (size_t i = 1; i < gen.output().size(); ++i) ASSERT_TRUE(m.Accept(gen.output()[i]));
    // With the end-of-text bias the answer ends as soon as the grammar allows it.
    EXPECT_EQ(gen.finish_reason(), FinishReason::kStop) << ModeName(mode);
    EXPECT_TRUE(m.CanEnd());
  }
}

TEST(Constrained, DiffusionCommitsInOrderUnderTheGrammar) {
  const Fixture& f = F();
  auto g = f.Compile(grammar::JsonSchemaToGbnf(std::string_view(kSchema)));
  DecodeParams p = f.Params(Mode::kDiffusion, g);
  p.block_size = 16;
  p.threshold = 0.9f;
  Generation gen = f.Run({5, 6, 7}, p);
  ExpectInLanguage(g, gen, "diffusion");
  // Forced stretches (keys, punctuation) commit several slots per pass.
  EXPECT_GT(gen.stats().tokens_per_pass(), 1.0);
}

TEST(Draw, FirstEntryWhoseCumulativeWeightExceedsU) {
  const std::vector<std::pair<int32_t, float>> d = {{4, 0.5f}, {9, 0.25f}, {2, 0.25f}};
  EXPECT_EQ(Draw(d, 0.0), 4);
  EXPECT_EQ(Draw(d, 0.49), 4);
  EXPECT_EQ(Draw(d, 0.5), 9);
  EXPECT_EQ(Draw(d, 0.8), 2);
  EXPECT_EQ(Draw(d, 1.5), 2);  // past the total: the last entry
  const std::vector<std::pair<int32_t, float>> w = {{1, 2.0f}, {3, 6.0f}};  // unnormalized
  EXPECT_EQ(Draw(w, 1.9), 1);
  EXPECT_EQ(Draw(w, 2.1), 3);
}

}  // namespace
}  // namespace crossword::decode
