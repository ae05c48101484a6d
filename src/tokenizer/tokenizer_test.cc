// Unit tests of the tokenizer on small synthetic vocabularies: UTF-8 and byte-level helpers, NFC,
// the qwen35/qwen2 pre-tokenizers (the cases users hit in other engines), BPE merge order, added
// and special tokens, streaming decode, thread safety and load errors.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "base/error.h"
#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace crossword::tokenizer {
namespace {

using Pieces = std::vector<std::string>;

// 256 byte-level symbols (id = byte), then merges over byte-level text, then extra tokens.
struct VocabBuilder {
  Vocabulary v;
  VocabBuilder() {
    v.pre = "qwen35";
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(BytesToByteLevel(std::string(1, static_cast<char>(b))));
      v.types.push_back(TokenType::kNormal);
    }
  }
  // Adds merge "left right" (raw bytes; converted to byte-level) and its result token.
  VocabBuilder& Merge(const std::string& left, const std::string& right) {
    std::string l = BytesToByteLevel(left), r = BytesToByteLevel(right);
    v.merges.push_back(l + " " + r);
    if (std::find(v.tokens.begin(), v.tokens.end(), l + r) == v.tokens.end()) {
      v.tokens.push_back(l + r);
      v.types.push_back(TokenType::kNormal);
    }
    return *this;
  }
  VocabBuilder& Add(const std::string& text, TokenType type) {
    v.tokens.push_back(text);
    v.types.push_back(type);
    return *this;
  }
};

Tokenizer HelloTokenizer() {
  VocabBuilder b;
  b.Merge("h", "e").Merge("l", "l").Merge("he", "ll").Merge("hell", "o").Merge(" ", "w");
  b.Merge("a", "a").Merge("b", "c").Merge("a", "b");
  b.Add("<|im_end|>", TokenType::kControl)
      .Add("<|im_start|>", TokenType::kControl)
      .Add("<|endoftext|>", TokenType::kControl)
      .Add("<think>", TokenType::kUserDefined)
      .Add("</think>", TokenType::kUserDefined)
      .Add("[PAD1]", TokenType::kUnused);
  b.v.eos = 256;  // "he"
  return Tokenizer::FromVocabulary(b.v);
}

int32_t Id(const Tokenizer& t, const std::string& raw) {
  auto id = t.FindToken(BytesToByteLevel(raw));
  if (!id) id = t.FindToken(raw);
  EXPECT_TRUE(id.has_value()) << raw;
  return id.value_or(-1);
}

// ---- UTF-8 / byte level ---------------------------------------------------------------------

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  auto lossy = [](std::string_view s) {
    std::string out;
    AppendUtf8Lossy(s, out);
    return out;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("a\xF0\x9F\x98"
                  "b"),
            "a" + fffd + "b");                           // truncated 4-byte: one U+FFFD
  EXPECT_EQ(lossy("\xE0\x80"), fffd + fffd);             // E0 needs A0..BF next
  EXPECT_EQ(lossy("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate: every byte
  EXPECT_EQ(lossy("\xC0\xAF"), fffd + fffd);             // overlong lead
  EXPECT_EQ(lossy("\xE6\xAD"), fffd);                    // dangling prefix at the end
  EXPECT_EQ(lossy("\xF0\x9F\x98\x8A"), "\xF0\x9F\x98\x8A");
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));
}

TEST(TokenizerUtf8, ByteLevelAlphabetIsGpt2) {
  const ByteLevelAlphabet& a = ByteLevel();
  EXPECT_EQ(a.byte_to_cp[' '], U'\u0120');   // "Ġ"
  EXPECT_EQ(a.byte_to_cp['\n'], U'\u010A');  // "Ċ"
  EXPECT_EQ(a.byte_to_cp['A'], U'A');
  EXPECT_EQ(a.byte_to_cp[0xAD], U'\u0143');  // the last shifted byte
  EXPECT_EQ(a.byte_to_cp[0xFF], U'\u00FF');
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(ByteLevelToBytes(BytesToByteLevel(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(ByteLevelToBytes(" ", back));  // a raw space is not in the alphabet
}

// ---- NFC --------------------------------------------------------------------------------------

std::string Nfc(std::string_view s) {
  std::string out;
  AppendNfc(s, out);
  return out;
}

TEST(TokenizerNfc, ComposesReordersAndKeepsExclusions) {
  EXPECT_EQ(Nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> é
  EXPECT_EQ(Nfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");                     // a + ^ + dot -> ậ
  EXPECT_EQ(Nfc("a\xCC\xA3\xCC\x82"), "\xE1\xBA\xAD");                     // other order, same
  EXPECT_EQ(Nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(Nfc("\xE2\x84\xAB"), "\xC3\x85");                              // Å sign -> Å
  EXPECT_EQ(Nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");              // U+0958 excluded
  EXPECT_EQ(Nfc("x\xFF\xCC\x81y"), "x\xFF\xCC\x81y");  // invalid byte blocks, is kept
  EXPECT_TRUE(IsNfcQuick("plain ASCII and Latin-1 \xC3\xA9"));
  EXPECT_FALSE(IsNfcQuick("e\xCC\x81"));
}

// ---- Pre-tokenizer: the cases users hit ---------------------------------------------------

Pieces Split(std::string_view pre, std::string_view text) {
  return Regex(FindPreTokenizer(pre).regex).SplitToVector(text);
}

TEST(TokenizerPreTokenizer, DigitsAreSplitOneByOne) {
  EXPECT_EQ(Split("qwen35", "Pi is 3.14159, year 2026"),
            (Pieces{"Pi", " is", " ", "3", ".", "1", "4", "1", "5", "9", ",", " year", " ", "2",
                    "0", "2", "6"}));
}

TEST(TokenizerPreTokenizer, UppercaseContractionsStayWhole) {
  Pieces p = Split("qwen35", "I'M sure they'RE fine, DON'T worry, we'll see");
  for (const char* c : {"'M", "'RE", "'T", "'ll"}) {
    EXPECT_NE(std::find(p.begin(), p.end(), c), p.end()) << c;
  }
}

TEST(TokenizerPreTokenizer, WhitespaceRuns) {
  EXPECT_EQ(Split("qwen35", "a  b\n\n\nc   \n d\t\te  "),
            (Pieces{"a", " ", " b", "\n\n\n", "c", "   \n", " d", "\t", "\te", "  "}));
}

TEST(TokenizerPreTokenizer, CombiningMarksStayWithTheirLetterInQwen35Only) {
  const std::string hindi = "हिन्दी विकिपीडिया", arabic = "ضَمَّة";
  EXPECT_EQ(Split("qwen35", hindi), (Pieces{"हिन्दी", " विकिपीडिया"}));
  EXPECT_EQ(Split("qwen35", arabic), (Pieces{arabic}));
  EXPECT_GT(Split("qwen2", hindi).size(), 2u);
  EXPECT_GT(Split("qwen2", arabic).size(), 1u);
}

TEST(TokenizerPreTokenizer, PiecesAlwaysConcatenateToTheInput) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(rng() % 256));
    for (std::string_view pre : {"qwen2", "qwen35"}) {
      std::string joined;
      for (const std::string& p : Split(pre, s)) {
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, s);
    }
  }
}

TEST(TokenizerPreTokenizer, UnknownNameIsAClearError) {
  try {
    FindPreTokenizer("llama-bpe");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama-bpe"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("qwen35"), std::string::npos);
  }
}

// ---- BPE -----------------------------------------------------------------------------------

TEST(TokenizerBpe, LowestRankFirstLeftmostOnTies) {
  Tokenizer t = HelloTokenizer();
  EXPECT_EQ(t.Encode("hello", false), (std::vector<int32_t>{Id(t, "hello")}));
  EXPECT_EQ(t.Encode("aaa", false), (std::vector<int32_t>{Id(t, "aa"), 'a'}));
  // "b c" has a lower rank than "a b", so "abc" -> a + bc.
  EXPECT_EQ(t.Encode("abc", false), (std::vector<int32_t>{'a', Id(t, "bc")}));
  EXPECT_EQ(t.Encode(" w", false), (std::vector<int32_t>{Id(t, " w")}));
}

TEST(TokenizerBpe, ScanAndHeapLoopsAgree) {
  // Random merges over a 4-letter alphabet, so long inputs exercise many rules.
  std::mt19937 rng(11);
  MergeTable table;
  table.Reserve(64);
  int32_t next_id = 4;
  for (int32_t rank = 0; rank < 60; ++rank) {
    int32_t l = static_cast<int32_t>(rng() % next_id), r = static_cast<int32_t>(rng() % next_id);
    if (table.Insert(l, r, rank, next_id)) ++next_id;
  }
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<int32_t> sym(1 + rng() % 300);
    for (int32_t& s : sym) s = static_cast<int32_t>(rng() % 4);
    std::vector<int32_t> scan, heap;
    BpeMerge(sym, table, scan, BpeAlgorithm::kScan);
    BpeMerge(sym, table, heap, BpeAlgorithm::kHeap);
    ASSERT_EQ(scan, heap) << "input length " << sym.size();
  }
}

// ---- Added and special tokens ----------------------------------------------------------------

TEST(TokenizerSpecialTokens, ControlTokensOnlyWhenAsked) {
  Tokenizer t = HelloTokenizer();
  const int32_t im_end = *t.FindToken("<|im_end|>");
  std::vector<int32_t> with = t.Encode("a<|im_end|>b", true);
  EXPECT_EQ(std::count(with.begin(), with.end(), im_end), 1);
  EXPECT_EQ(with, (std::vector<int32_t>{'a', im_end, 'b'}));
  std::vector<int32_t> without = t.Encode("a<|im_end|>b", false);
  for (int32_t id : without) EXPECT_NE(t.GetTokenType(id), TokenType::kControl) << id;
  EXPECT_EQ(t.Decode(without), "a<|im_end|>b");
  // Added non-special tokens (HF special=false, GGUF USER_DEFINED) match in any text.
  std::vector<int32_t> think = t.Encode("x<think>y", false);
  EXPECT_EQ(think, (std::vector<int32_t>{'x', *t.FindToken("<think>"), 'y'}));
  // Leftmost-longest: "</think>" is not cut as "<" + ... + "think>".
  EXPECT_EQ(t.Encode("</think>", false), (std::vector<int32_t>{*t.FindToken("</think>")}));
}

TEST(TokenizerSpecialTokens, EogAndNamedIds) {
  Tokenizer t = HelloTokenizer();
  EXPECT_TRUE(t.IsEog(*t.FindToken("<|im_end|>")));
  EXPECT_TRUE(t.IsEog(*t.FindToken("<|endoftext|>")));
  EXPECT_TRUE(t.IsEog(256));  // the eos id
  EXPECT_FALSE(t.IsEog(*t.FindToken("<|im_start|>")));
  EXPECT_EQ(t.special().think, t.FindToken("<think>"));
  EXPECT_EQ(t.special().im_start, t.FindToken("<|im_start|>"));
  EXPECT_FALSE(t.special().tool_call.has_value());
  const int32_t pad = *t.FindToken("[PAD1]");
  EXPECT_EQ(t.Decode(std::vector<int32_t>{pad}), "");
  EXPECT_EQ(t.Decode(std::vector<int32_t>{'a', *t.FindToken("<|im_end|>")}, false), "a");
}

// ---- Decoding and streaming ----------------------------------------------------------------

TEST(TokenizerStream, EmojiBytesComeOutWhole) {
  Tokenizer t = HelloTokenizer();
  StreamDecoder d(t);
  const int32_t bytes[] = {0xF0, 0x9F, 0x98, 0x8A};  // byte ids = byte values in this vocab
  EXPECT_EQ(d.Feed(bytes[0]), "");
  EXPECT_EQ(d.Feed(bytes[1]), "");
  EXPECT_EQ(d.Feed(bytes[2]), "");
  EXPECT_EQ(d.Feed(bytes[3]), "\xF0\x9F\x98\x8A");
  EXPECT_EQ(d.Flush(), "");
}

TEST(TokenizerStream, CutInsideACharacterEndsWithOneReplacementCharacter) {
  Tokenizer t = HelloTokenizer();
  StreamDecoder d(t);
  EXPECT_EQ(d.Feed(0xF0), "");
  EXPECT_EQ(d.Feed(0x9F), "");
  EXPECT_EQ(d.pending_bytes(), 2u);
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");  // documented: dangling bytes -> one U+FFFD
  EXPECT_EQ(d.Feed('o'), "o");           // reusable after Flush
}

TEST(TokenizerStream, InvalidBytesAreReplacedAsSoonAsKnown) {
  Tokenizer t = HelloTokenizer();
  StreamDecoder d(t);
  EXPECT_EQ(d.Feed(0xE6), "");
  EXPECT_EQ(d.Feed('x'), "\xEF\xBF\xBDx");
  EXPECT_EQ(d.Feed(0xFF), "\xEF\xBF\xBD");
}

TEST(TokenizerStream, ConcatenationEqualsLossyDecodeOfEverything) {
  Tokenizer t = HelloTokenizer();
  std::mt19937 rng(3);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<int32_t> ids(rng() % 20);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % t.n_vocab());
    StreamDecoder d(t);
    std::string streamed;
    for (int32_t id : ids) streamed += d.Feed(id);
    streamed += d.Flush();
    std::string expected;
    AppendUtf8Lossy(t.Decode(ids), expected);
    EXPECT_EQ(streamed, expected);
  }
}

TEST(TokenizerDecode, RawBytesRoundTrip) {
  Tokenizer t = HelloTokenizer();
  std::vector<int32_t> ids = t.Encode("\xE6\xAD", false);  // half of 正: not UTF-8
  EXPECT_EQ(ids, (std::vector<int32_t>{0xE6, 0xAD}));
  EXPECT_EQ(t.Decode(ids), "\xE6\xAD");
  std::mt19937 rng(5);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    for (int i = 0, n = static_cast<int>(rng() % 50); i < n; ++i) s.push_back(char(rng() % 256));
    EXPECT_EQ(t.Decode(t.Encode(s, false)), Nfc(s));
  }
  EXPECT_THROW(t.Decode(std::vector<int32_t>{t.n_vocab()}), Error);
  EXPECT_THROW(t.TokenText(-1), Error);
}

TEST(TokenizerThreads, ConcurrentEncodesAgree) {
  Tokenizer t = HelloTokenizer();
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "hello aab abc<think> w" + std::to_string(i) + "\n";
  const std::vector<int32_t> expected = t.Encode(text, true);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back([&, k] { got[k] = t.Encode(text, true); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

// ---- Load errors ---------------------------------------------------------------------------

std::string LoadError(const Vocabulary& v) {
  try {
    Tokenizer::FromVocabulary(v);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerLoad, ErrorsNameTheProblem) {
  VocabBuilder b;
  b.Merge("a", "b");
  Vocabulary v = b.v;
  v.pre = "gpt-4o";
  EXPECT_NE(LoadError(v).find("gpt-4o"), std::string::npos);
  v = b.v;
  v.merges.push_back("a zz");
  EXPECT_NE(LoadError(v).find("zz"), std::string::npos);
  v = b.v;
  v.merges.push_back("abc");
  EXPECT_NE(LoadError(v).find("merges[1]"), std::string::npos);
  v = b.v;
  v.tokens[0x41] = "not-A";
  EXPECT_NE(LoadError(v).find("0x41"), std::string::npos);
  v = b.v;
  v.eos = 100000;
  EXPECT_NE(LoadError(v).find("eos"), std::string::npos);
  v = b.v;
  v.model = "llama";
  EXPECT_NE(LoadError(v).find("llama"), std::string::npos);
}

// Writes a GGUF with the vocabulary keys of `v`, edited by `edit`, and returns the load error.
template <typename Edit>
std::string GgufLoadError(const Vocabulary& v, Edit&& edit) {
  const std::string path = ::testing::TempDir() + "/tok_vocab_test.gguf";
  {
    gguf::Writer w(path);
    w.AddKeyValue("general.architecture", gguf::Value::String("qwen35"));
    edit(w);
    WriteVocabulary(v, w);
    w.Finish();
  }
  try {
    gguf::File f = gguf::File::Open(path);
    Tokenizer::FromGguf(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerLoad, GgufRoundTripAndKeyErrors) {
  VocabBuilder b;
  b.Merge("h", "e").Add("<|im_end|>", TokenType::kControl);
  b.v.eos = 257;
  EXPECT_EQ(GgufLoadError(b.v, [](gguf::Writer&) {}), "");  // loads fine
  const std::string path = ::testing::TempDir() + "/tok_vocab_test.gguf";
  {
    gguf::File f = gguf::File::Open(path);
    Tokenizer t = Tokenizer::FromGguf(f);
    EXPECT_EQ(t.special().eos, 257);
    EXPECT_TRUE(t.IsEog(257));
    EXPECT_EQ(t.Encode("hex", false), (std::vector<int32_t>{256, 'x'}));
  }
  Vocabulary v = b.v;
  v.model = "llama";
  EXPECT_NE(GgufLoadError(v, [](gguf::Writer&) {}).find("tokenizer.ggml.model"), std::string::npos);
  v = b.v;
  v.pre = "falcon";
  EXPECT_NE(GgufLoadError(v, [](gguf::Writer&) {}).find("falcon"), std::string::npos);
  // A wrong type for an optional key is named too.
  std::string e = GgufLoadError(b.v, [](gguf::Writer& w) {
    w.AddKeyValue("tokenizer.ggml.bos_token_id", gguf::Value::String("oops"));
  });
  EXPECT_NE(e.find("tokenizer.ggml.bos_token_id"), std::string::npos) << e;
  // token_type of the wrong length.
  v = b.v;
  v.types.pop_back();
  e = GgufLoadError(v, [](gguf::Writer&) {});
  EXPECT_NE(e.find("tokenizer.ggml.token_type"), std::string::npos) << e;
}

TEST(TokenizerLoad, MissingTokensKeyIsNamed) {
  const std::string path = ::testing::TempDir() + "/tok_empty_test.gguf";
  {
    gguf::Writer w(path);
    w.AddKeyValue("general.architecture", gguf::Value::String("qwen35"));
    w.AddKeyValue("tokenizer.ggml.model", gguf::Value::String("gpt2"));
    w.AddKeyValue("tokenizer.ggml.pre", gguf::Value::String("qwen35"));
    w.Finish();
  }
  gguf::File f = gguf::File::Open(path);
  try {
    Tokenizer::FromGguf(f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crossword::tokenizer
