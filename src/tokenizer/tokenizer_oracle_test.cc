// Oracle test: the real Qwen3 tokenizer.json, converted by our converter into a GGUF vocabulary
// and read back, must give the same ids as Hugging Face tokenizers (native Rust build) on the
// >= 1 MB corpus, for the qwen2 and qwen35 pre-tokenizers, with and without special-token parsing,
// and the same decoded text. Inputs come from tests/oracles/tok_oracle_setup.sh (CTest fixture).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/nfc.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace crossword::tokenizer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

fs::path OracleDir() {
  const char* dir = std::getenv("TOK_ORACLE_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path(CROSSWORD_TOK_ORACLE_DIR);
}

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing " << p << " (run tests/oracles/tok_oracle_setup.sh)";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Json ReadJson(const fs::path& p) { return Json::parse(ReadText(p)); }

// tokenizer.json -> our converter -> GGUF file -> gguf reader -> Tokenizer.
Tokenizer Convert(const std::string& variant) {
  const fs::path dir = OracleDir();
  Vocabulary vocab = VocabularyFromHfFiles((dir / (variant + ".json")).string(),
                                           (dir / "tokenizer_config.json").string());
  const fs::path gguf_path = dir / (variant + ".gguf");
  WriteVocabularyGguf(vocab, gguf_path.string(), vocab.pre, "qwen3-tokenizer-" + variant);
  gguf::File file = gguf::File::Open(gguf_path.string());
  return Tokenizer::FromGguf(file);
}

// Converted once per test binary (parsing the 5 MB JSON is the slow part).
const Tokenizer& LoadConverted(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[variant];
  if (!slot) slot = std::make_unique<Tokenizer>(Convert(variant));
  return *slot;
}

const std::vector<std::string>& Corpus() {
  static const std::vector<std::string> corpus =
      ReadJson(OracleDir() / "corpus.json").get<std::vector<std::string>>();
  return corpus;
}

// Compares our ids with HF's for every document; prints the first disagreements with context.
// `hf_variant` names HF's ids: "qwen2" (all added tokens) or "qwen2_plain" (HF given a copy
// without the CONTROL added tokens, which is what parse_special=false means for us).
void ExpectSameIds(const std::string& variant, const std::string& hf_variant, bool parse_special) {
  const Tokenizer& tok = LoadConverted(variant);
  const auto hf = ReadJson(OracleDir() / ("hf_" + hf_variant + ".ids.json"))
                      .get<std::vector<std::vector<int32_t>>>();
  const auto& corpus = Corpus();
  ASSERT_EQ(hf.size(), corpus.size());
  size_t bytes = 0, tokens = 0, docs_equal = 0, shown = 0;
  for (size_t d = 0; d < corpus.size(); ++d) {
    std::vector<int32_t> ours = tok.Encode(corpus[d], parse_special);
    bytes += corpus[d].size();
    tokens += hf[d].size();
    if (ours == hf[d]) {
      ++docs_equal;
      continue;
    }
    if (shown++ < 5) {
      size_t i = 0;
      while (i < ours.size() && i < hf[d].size() && ours[i] == hf[d][i]) ++i;
      std::string context;
      for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(i + 4, hf[d].size()); ++k) {
        context += fmt::format(" {}:'{}'", hf[d][k], tok.TokenText(hf[d][k]));
      }
      ADD_FAILURE() << variant << " doc " << d << ": first difference at token " << i << " (ours "
                    << (i < ours.size() ? ours[i] : -1) << " '"
                    << (i < ours.size() ? std::string(tok.TokenText(ours[i])) : "")
                    << "'), HF around it:" << context;
    }
  }
  std::printf(
      "[ oracle   ] %s vs HF %s, parse_special=%d: %zu/%zu documents identical, %zu bytes, %zu HF "
      "tokens\n",
      variant.c_str(), hf_variant.c_str(), parse_special, docs_equal, corpus.size(), bytes, tokens);
  EXPECT_GE(bytes, 1000000u) << "the agreement corpus must be at least 1 MB";
  EXPECT_EQ(docs_equal, corpus.size());
}

TEST(HfOracle, Qwen2WithSpecialTokens) { ExpectSameIds("qwen2", "qwen2", true); }
TEST(HfOracle, Qwen2WithoutSpecialTokens) { ExpectSameIds("qwen2", "qwen2_plain", false); }
TEST(HfOracle, Qwen35WithSpecialTokens) { ExpectSameIds("qwen35", "qwen35", true); }
TEST(HfOracle, Qwen35WithoutSpecialTokens) { ExpectSameIds("qwen35", "qwen35_plain", false); }

TEST(HfOracle, ConvertedVocabularyFacts) {
  const Tokenizer& tok = LoadConverted("qwen2");
  EXPECT_EQ(tok.n_vocab(), 151669);
  EXPECT_EQ(tok.pre(), "qwen2");
  EXPECT_EQ(tok.Encode("Hello, world!", false), (std::vector<int32_t>{9707, 11, 1879, 0}));
  EXPECT_EQ(tok.special().im_end, 151645);
  EXPECT_EQ(tok.special().eos, 151645);  // tokenizer_config.json eos_token
  EXPECT_EQ(tok.special().pad, 151643);
  EXPECT_EQ(tok.special().think, 151667);
  EXPECT_EQ(tok.special().tool_call_end, 151658);
  EXPECT_EQ(tok.GetTokenType(151645), TokenType::kControl);
  EXPECT_EQ(tok.GetTokenType(151667), TokenType::kUserDefined);  // special=false in tokenizer.json
  EXPECT_EQ(tok.GetTokenType(151659), TokenType::kControl);      // <|fim_prefix|> looks special
  EXPECT_TRUE(tok.IsEog(151645));
  EXPECT_TRUE(tok.IsEog(151643));
  EXPECT_FALSE(tok.IsEog(151644));
  EXPECT_EQ(LoadConverted("qwen35").pre(), "qwen35");
}

TEST(HfOracle, GgufRoundTripKeepsTheVocabulary) {
  const fs::path dir = OracleDir();
  Vocabulary vocab = VocabularyFromHfFiles((dir / "qwen35.json").string(),
                                           (dir / "tokenizer_config.json").string());
  LoadConverted("qwen35");  // writes qwen35.gguf
  gguf::File file = gguf::File::Open((dir / "qwen35.gguf").string());
  Vocabulary back = ReadVocabulary(file);
  EXPECT_EQ(file.architecture(), "qwen35");
  EXPECT_EQ(back.pre, "qwen35");
  EXPECT_EQ(back.tokens, vocab.tokens);
  EXPECT_EQ(back.types, vocab.types);
  EXPECT_EQ(back.merges, vocab.merges);
  EXPECT_EQ(back.eos, vocab.eos);
  EXPECT_EQ(back.pad, vocab.pad);
  EXPECT_EQ(back.chat_template, vocab.chat_template);
  ASSERT_TRUE(back.chat_template.has_value());
  EXPECT_NE(back.chat_template->find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(back.merges.size(), 151387u);
}

TEST(HfOracle, SpecialTokenInTextOnlyWhenAsked) {
  const Tokenizer& tok = LoadConverted("qwen35");
  const int32_t im_end = *tok.special().im_end;
  std::vector<int32_t> with = tok.Encode("a<|im_end|>b", true);
  EXPECT_EQ(std::count(with.begin(), with.end(), im_end), 1);
  std::vector<int32_t> without = tok.Encode("a<|im_end|>b", false);
  for (int32_t id : without) EXPECT_NE(tok.GetTokenType(id), TokenType::kControl) << id;
  EXPECT_EQ(tok.Decode(without), "a<|im_end|>b");
}

TEST(HfOracle, StreamingEmojiAndRawBytes) {
  const Tokenizer& tok = LoadConverted("qwen35");
  auto byte_id = [&](uint8_t b) {
    return *tok.FindToken(BytesToByteLevel(std::string(1, static_cast<char>(b))));
  };
  StreamDecoder d(tok);
  EXPECT_EQ(d.Feed(byte_id(0xF0)), "");
  EXPECT_EQ(d.Feed(byte_id(0x9F)), "");
  EXPECT_EQ(d.Feed(byte_id(0x98)), "");
  EXPECT_EQ(d.Feed(byte_id(0x8A)), "😊");
  EXPECT_EQ(d.Feed(byte_id(0xF0)), "");
  EXPECT_EQ(d.Feed(byte_id(0x9F)), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");
  // Half of a CJK character (not UTF-8): Qwen has a merged token for exactly these bytes.
  std::vector<int32_t> ids = tok.Encode("\xE6\xAD", false);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(tok.Decode(ids), "\xE6\xAD");
  EXPECT_EQ(tok.Decode(tok.Encode("x\xE6\xAD\xFF y", false)), "x\xE6\xAD\xFF y");
}

TEST(HfOracle, DecodeMatchesHf) {
  const Tokenizer& tok = LoadConverted("qwen2");
  const Json cases = ReadJson(OracleDir() / "hf_decode.json").at("cases");
  ASSERT_GE(cases.size(), 100u);
  size_t same_lossy = 0, same_stream = 0;
  for (const Json& c : cases) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const std::string expected = c.at("text").get<std::string>();
    std::string lossy;
    AppendUtf8Lossy(tok.Decode(ids), lossy);
    same_lossy += lossy == expected;
    EXPECT_EQ(lossy, expected);
    StreamDecoder d(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += d.Feed(id);
    streamed += d.Flush();
    same_stream += streamed == expected;
    EXPECT_EQ(streamed, expected);
  }
  std::printf("[ oracle   ] decode: %zu/%zu lossy, %zu/%zu streamed identical to HF\n", same_lossy,
              cases.size(), same_stream, cases.size());
}

TEST(HfOracle, DecodeOfEncodeIsTheNfcText) {
  const Tokenizer& tok = LoadConverted("qwen35");
  size_t unchanged = 0;
  for (const std::string& doc : Corpus()) {
    std::string nfc;
    AppendNfc(doc, nfc);
    EXPECT_EQ(tok.Decode(tok.Encode(doc, true)), nfc);
    unchanged += nfc == doc;
  }
  // The corpus holds decomposed text on purpose: some documents must change under NFC.
  EXPECT_LT(unchanged, Corpus().size());
}

}  // namespace
}  // namespace crossword::tokenizer
