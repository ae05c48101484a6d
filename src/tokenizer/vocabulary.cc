// Reading and writing the GGUF `tokenizer.ggml.*` keys (see vocabulary.h).
#include "tokenizer/vocabulary.h"

#include <cstdio>
#include <limits>

#include "base/error.h"
#include "gguf/gguf.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"

namespace crossword::tokenizer {
namespace {

constexpr std::string_view kModel = "tokenizer.ggml.model";
constexpr std::string_view kPre = "tokenizer.ggml.pre";
constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kMerges = "tokenizer.ggml.merges";
constexpr std::string_view kAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kTemplate = "tokenizer.chat_template";

struct IdKey {
  std::string_view key;
  std::optional<int32_t> Vocabulary::*field;
};
constexpr IdKey kIdKeys[] = {
    {"tokenizer.ggml.bos_token_id", &Vocabulary::bos},
    {"tokenizer.ggml.eos_token_id", &Vocabulary::eos},
    {"tokenizer.ggml.eot_token_id", &Vocabulary::eot},
    {"tokenizer.ggml.padding_token_id", &Vocabulary::pad},
    {"tokenizer.ggml.mask_token_id", &Vocabulary::mask},
};

std::vector<std::string> ReadStrings(const gguf::File& file, std::string_view key) {
  const gguf::Value* v = file.Find(key);
  Check(v != nullptr,
        "{}: key '{}' not found; the file has no tokenizer vocabulary (convert it "
        "with a tokenizer, e.g. `crossword tokenizer convert-hf`)",
        file.path(), key);
  auto items = v->StringArray();
  Check(items.has_value(), "{}: key '{}' must be an array of strings, found {}", file.path(), key,
        v->ToString(2, 40));
  return {items->begin(), items->end()};
}

}  // namespace

std::string_view TokenTypeName(TokenType type) {
  switch (type) {
    case TokenType::kUndefined:
      return "undefined";
    case TokenType::kNormal:
      return "normal";
    case TokenType::kUnknown:
      return "unknown";
    case TokenType::kControl:
      return "control";
    case TokenType::kUserDefined:
      return "user_defined";
    case TokenType::kUnused:
      return "unused";
    case TokenType::kByte:
      return "byte";
  }
  return "invalid";
}

Vocabulary ReadVocabulary(const gguf::File& file) {
  Vocabulary vocab;
  auto model = file.GetString(kModel);
  Check(model.has_value(), "{}: key '{}' not found; the file has no tokenizer vocabulary",
        file.path(), kModel);
  vocab.model = std::string(*model);
  Check(vocab.model == "gpt2",
        "{}: {} = '{}' is not supported; crossword implements byte-level BPE ('gpt2') only",
        file.path(), kModel, vocab.model);
  auto pre = file.GetString(kPre);
  Check(pre.has_value(),
        "{}: key '{}' not found; a gpt2 vocabulary needs its pre-tokenizer name "
        "(e.g. 'qwen35')",
        file.path(), kPre);
  vocab.pre = std::string(*pre);
  vocab.tokens = ReadStrings(file, kTokens);
  Check(!vocab.tokens.empty(), "{}: key '{}' is empty", file.path(), kTokens);
  Check(vocab.tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
        "{}: key '{}' has {} tokens, more than int32 ids allow", file.path(), kTokens,
        vocab.tokens.size());
  if (const gguf::Value* v = file.Find(kTypes)) {
    auto types = v->Int32Array();
    Check(types.has_value(), "{}: key '{}' must be an integer array, found {}", file.path(), kTypes,
          v->ToString(2, 40));
    Check(types->size() == vocab.tokens.size(),
          "{}: key '{}' has {} entries but '{}' has {}; they must have the same length",
          file.path(), kTypes, types->size(), kTokens, vocab.tokens.size());
    vocab.types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      int32_t t = (*types)[i];
      Check(t >= 0 && t <= static_cast<int32_t>(TokenType::kByte),
            "{}: key '{}' entry {} (token '{}') is {}, expected a token type in 0..6", file.path(),
            kTypes, i, vocab.tokens[i], t);
      vocab.types.push_back(static_cast<TokenType>(t));
    }
  }
  vocab.merges = ReadStrings(file, kMerges);
  for (const IdKey& k : kIdKeys) {
    auto id = file.GetUint(k.key);
    if (!id.has_value()) continue;
    Check(*id < vocab.tokens.size(), "{}: key '{}' = {} is outside the vocabulary of {} tokens",
          file.path(), k.key, *id, vocab.tokens.size());
    vocab.*(k.field) = static_cast<int32_t>(*id);
  }
  vocab.add_bos = file.GetBool(kAddBos).value_or(false);
  if (auto t = file.GetString(kTemplate)) vocab.chat_template = std::string(*t);
  return vocab;
}

// Defined here rather than in tokenizer.cc so that code using only FromVocabulary does not
// link the GGUF reader.
Tokenizer Tokenizer::FromGguf(const gguf::File& file) {
  Vocabulary vocab = ReadVocabulary(file);
  try {
    return FromVocabulary(vocab);
  } catch (const Error& e) {
    throw Error(file.path() + ": " + e.what());
  }
}

void WriteVocabulary(const Vocabulary& vocab, gguf::Writer& writer) {
  writer.AddKeyValue(std::string(kModel), gguf::Value::String(vocab.model));
  writer.AddKeyValue(std::string(kPre), gguf::Value::String(vocab.pre));
  writer.AddKeyValue(std::string(kTokens), gguf::Value::Strings(vocab.tokens));
  if (!vocab.types.empty()) {
    std::vector<int32_t> types(vocab.types.size());
    for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(vocab.types[i]);
    writer.AddKeyValue(std::string(kTypes), gguf::Value::Int32s(types));
  }
  writer.AddKeyValue(std::string(kMerges), gguf::Value::Strings(vocab.merges));
  for (const IdKey& k : kIdKeys) {
    if (const auto& id = vocab.*(k.field)) {
      writer.AddKeyValue(std::string(k.key), gguf::Value::Uint32(static_cast<uint32_t>(*id)));
    }
  }
  writer.AddKeyValue(std::string(kAddBos), gguf::Value::Bool(vocab.add_bos));
  if (vocab.chat_template) {
    writer.AddKeyValue(std::string(kTemplate), gguf::Value::String(*vocab.chat_template));
  }
}

void WriteVocabularyGguf(const Vocabulary& vocab, const std::string& path,
                         std::string_view architecture, std::string_view name) {
  const std::string tmp = path + ".tmp";
  try {
    gguf::Writer writer(tmp);
    writer.AddKeyValue("general.architecture", gguf::Value::String(std::string(architecture)));
    writer.AddKeyValue("general.name", gguf::Value::String(std::string(name)));
    WriteVocabulary(vocab, writer);
    writer.Finish();
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  Check(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '{}' to '{}'", tmp, path);
}

}  // namespace crossword::tokenizer
