// tokenizer.json (+ tokenizer_config.json) -> Vocabulary -> vocabulary-only GGUF (see hf_import.h).
#include "tokenizer/hf_import.h"

#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "tokenizer/pretokenizer.h"

namespace crossword::tokenizer {
namespace {

using Json = nlohmann::json;

Json Parse(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    Fail("{} is not valid JSON: {}", what, e.what());
  }
}

const Json& Field(const Json& obj, const char* key, std::string_view where) {
  Check(obj.is_object() && obj.contains(key), "tokenizer.json: {} has no field '{}'", where, key);
  return obj.at(key);
}

std::string Dump(const Json& j) {
  std::string s = j.dump();
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

bool IsNullOrEmpty(const Json& obj, const char* key) {
  if (!obj.contains(key)) return true;
  const Json& v = obj.at(key);
  return v.is_null() || (v.is_string() && v.get<std::string>().empty());
}

bool IsTrue(const Json& obj, const char* key) {
  return obj.contains(key) && obj.at(key).is_boolean() && obj.at(key).get<bool>();
}

// The pre-tokenizer name implied by pre_tokenizer = Sequence[Split(regex), ByteLevel].
const PreTokenizerSpec& DetectPre(const Json& pre) {
  Check(pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
            pre.at("pretokenizers").is_array() && pre.at("pretokenizers").size() == 2,
        "tokenizer.json: pre_tokenizer must be Sequence[Split, ByteLevel] (byte-level BPE with a "
        "split regex), found {}",
        Dump(pre));
  const Json& split = pre.at("pretokenizers")[0];
  const Json& bytelevel = pre.at("pretokenizers")[1];
  Check(split.value("type", "") == "Split" && split.value("behavior", "") == "Isolated" &&
            !IsTrue(split, "invert") && split.contains("pattern") &&
            split.at("pattern").contains("Regex"),
        "tokenizer.json: pre_tokenizer.pretokenizers[0] must be Split with a Regex pattern, "
        "behavior Isolated, invert false; found {}",
        Dump(split));
  Check(bytelevel.value("type", "") == "ByteLevel" && !IsTrue(bytelevel, "use_regex") &&
            !IsTrue(bytelevel, "add_prefix_space"),
        "tokenizer.json: pre_tokenizer.pretokenizers[1] must be ByteLevel with use_regex and "
        "add_prefix_space false; found {}",
        Dump(bytelevel));
  std::string regex = split.at("pattern").at("Regex").get<std::string>();
  const PreTokenizerSpec* spec = FindPreTokenizerByRegex(regex);
  if (spec == nullptr) {
    std::string names;
    for (std::string_view n : PreTokenizerNames())
      names += (names.empty() ? "" : ", ") + std::string(n);
    Fail(
        "tokenizer.json: the Split regex {} is not one of the supported pre-tokenizers ({}); add "
        "it to src/tokenizer/pretokenizer.cc",
        Json(regex).dump(), names);
  }
  return *spec;
}

// Token text from tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::optional<std::string> ConfigToken(const Json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const Json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
    return v.at("content").get<std::string>();
  }
  return std::nullopt;
}

bool LooksSpecial(std::string_view text) {
  return text.size() >= 4 && text.substr(0, 2) == "<|" && text.substr(text.size() - 2) == "|>";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Check(in.good(), "cannot open '{}' for reading", path);
  std::ostringstream s;
  s << in.rdbuf();
  Check(!in.bad(), "error reading '{}'", path);
  return s.str();
}

}  // namespace

namespace {

Vocabulary FromHfJson(std::string_view tokenizer_json, std::string_view config_json,
                      const HfImportOptions& options) {
  Json tok = Parse(tokenizer_json, "tokenizer.json");
  Check(tok.is_object(), "tokenizer.json: the top level must be an object");
  Vocabulary vocab;
  vocab.model = "gpt2";

  const Json& model = Field(tok, "model", "the top level");
  Check(model.value("type", "") == "BPE", "tokenizer.json: model.type must be \"BPE\", found {}",
        Dump(model.value("type", Json())));
  Check(!IsTrue(model, "byte_fallback"),
        "tokenizer.json: model.byte_fallback = true is not "
        "supported (SentencePiece-style BPE); only byte-level BPE is");
  Check(!IsTrue(model, "ignore_merges"),
        "tokenizer.json: model.ignore_merges = true is not "
        "supported (it changes which merges apply)");
  Check(IsNullOrEmpty(model, "dropout") || model.at("dropout").get<double>() == 0.0,
        "tokenizer.json: model.dropout must be null for deterministic encoding");
  Check(IsNullOrEmpty(model, "continuing_subword_prefix") &&
            IsNullOrEmpty(model, "end_of_word_suffix"),
        "tokenizer.json: model.continuing_subword_prefix / end_of_word_suffix are not supported");

  const PreTokenizerSpec& pre = DetectPre(Field(tok, "pre_tokenizer", "the top level"));
  vocab.pre = std::string(pre.name);
  const Json normalizer = tok.value("normalizer", Json());
  const bool nfc = normalizer.is_object() && normalizer.value("type", "") == "NFC";
  Check(nfc == pre.nfc && (nfc || normalizer.is_null()),
        "tokenizer.json: normalizer {} does not match what pre-tokenizer '{}' implements ({})",
        Dump(normalizer), pre.name, pre.nfc ? "NFC" : "none");
  const Json decoder = tok.value("decoder", Json());
  Check(decoder.is_object() && decoder.value("type", "") == "ByteLevel",
        "tokenizer.json: decoder must be ByteLevel, found {}", Dump(decoder));

  // Ids -> text, vocab first, then added tokens (which may repeat a vocab entry).
  std::map<int64_t, std::pair<std::string, TokenType>> by_id;
  const Json& v = Field(model, "vocab", "model");
  Check(v.is_object(), "tokenizer.json: model.vocab must be an object of token -> id");
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;
  for (const auto& [text, id_json] : v.items()) {
    Check(id_json.is_number_integer(), "tokenizer.json: model.vocab[{}] is not an integer id",
          Json(text).dump());
    int64_t id = id_json.get<int64_t>();
    Check(id >= 0 && id <= kMaxId, "tokenizer.json: model.vocab[{}] = {} is out of range",
          Json(text).dump(), id);
    bool fresh = by_id.emplace(id, std::pair(text, TokenType::kNormal)).second;
    Check(fresh, "tokenizer.json: id {} is used by two vocab entries ({} and {})", id,
          Json(by_id[id].first).dump(), Json(text).dump());
  }
  if (tok.contains("added_tokens") && tok.at("added_tokens").is_array()) {
    for (const Json& a : tok.at("added_tokens")) {
      Check(a.is_object() && a.contains("id") && a.at("id").is_number_integer() &&
                a.contains("content") && a.at("content").is_string(),
            "tokenizer.json: added_tokens entry {} needs an integer id and a string content",
            Dump(a));
      int64_t id = a.at("id").get<int64_t>();
      std::string content = a.at("content").get<std::string>();
      Check(id >= 0 && id <= kMaxId, "tokenizer.json: added token {} has id {} out of range",
            Json(content).dump(), id);
      Check(!IsTrue(a, "lstrip") && !IsTrue(a, "rstrip") && !IsTrue(a, "single_word"),
            "tokenizer.json: added token {} uses lstrip/rstrip/single_word, which GGUF token "
            "types cannot express",
            Json(content).dump());
      TokenType type = IsTrue(a, "special") || LooksSpecial(content) ? TokenType::kControl
                                                                     : TokenType::kUserDefined;
      auto it = by_id.find(id);
      if (it != by_id.end()) {
        Check(it->second.first == content,
              "tokenizer.json: added token {} has id {}, which model.vocab gives to {}",
              Json(content).dump(), id, Json(it->second.first).dump());
        it->second.second = type;
      } else {
        by_id.emplace(id, std::pair(content, type));
      }
    }
  }
  Check(!by_id.empty(), "tokenizer.json: model.vocab is empty");
  int64_t n = std::max<int64_t>(by_id.rbegin()->first + 1, options.pad_to);
  vocab.tokens.resize(n);
  vocab.types.assign(n, TokenType::kUnused);
  for (int64_t id = 0; id < n; ++id) vocab.tokens[id] = "[PAD" + std::to_string(id) + "]";
  for (auto& [id, entry] : by_id) {
    vocab.tokens[id] = std::move(entry.first);
    vocab.types[id] = entry.second;
  }

  const Json& merges = Field(model, "merges", "model");
  Check(merges.is_array(), "tokenizer.json: model.merges must be an array");
  vocab.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {
      vocab.merges.push_back(m.get<std::string>());
    } else {
      Check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
            "tokenizer.json: model.merges[{}] = {} is neither \"a b\" nor [\"a\", \"b\"]", i,
            Dump(m));
      std::string l = m[0].get<std::string>(), r = m[1].get<std::string>();
      Check(l.find(' ') == std::string::npos && r.find(' ') == std::string::npos,
            "tokenizer.json: model.merges[{}] = {} contains a space, which the GGUF merge format "
            "(\"a b\") cannot hold",
            i, Dump(m));
      vocab.merges.push_back(l + " " + r);
    }
  }

  if (!config_json.empty()) {
    Json config = Parse(config_json, "tokenizer_config.json");
    auto id_of = [&](const char* key) -> std::optional<int32_t> {
      auto text = ConfigToken(config, key);
      if (!text) return std::nullopt;
      for (int64_t id = 0; id < n; ++id) {
        if (vocab.tokens[id] == *text) return static_cast<int32_t>(id);
      }
      Fail("tokenizer_config.json: {} = {} is not a token of tokenizer.json", key,
           Json(*text).dump());
    };
    vocab.eos = id_of("eos_token");
    vocab.pad = id_of("pad_token");
    vocab.bos = id_of("bos_token");
    vocab.add_bos = IsTrue(config, "add_bos_token");
    if (config.contains("chat_template")) {
      const Json& t = config.at("chat_template");
      if (t.is_string()) {
        vocab.chat_template = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const Json& e : t) {
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template")) {
            vocab.chat_template = e.at("template").get<std::string>();
          }
        }
      }
    }
  }
  return vocab;
}

}  // namespace

Vocabulary VocabularyFromHfJson(std::string_view tokenizer_json, std::string_view config_json,
                                const HfImportOptions& options) {
  try {
    return FromHfJson(tokenizer_json, config_json, options);
  } catch (const Json::exception& e) {  // a field of an unexpected JSON type
    Fail("tokenizer.json / tokenizer_config.json: unexpected value: {}", e.what());
  }
}

Vocabulary VocabularyFromHfFiles(const std::string& tokenizer_path, const std::string& config_path,
                                 const HfImportOptions& options) {
  std::string tok = ReadFile(tokenizer_path);
  std::string config = config_path.empty() ? std::string() : ReadFile(config_path);
  try {
    return VocabularyFromHfJson(tok, config, options);
  } catch (const Error& e) {
    throw Error(tokenizer_path + ": " + e.what());
  }
}

}  // namespace crossword::tokenizer
