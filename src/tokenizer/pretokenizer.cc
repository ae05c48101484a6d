// Pre-tokenizer table and the PCRE2 wrapper (see pretokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace crossword::tokenizer {
namespace {

// The regexes are the ones the Qwen tokenizer.json files publish (`pre_tokenizer` Split
// pattern). qwen35 differs from qwen2 only by keeping combining marks (\p{M}) in letter runs.
constexpr std::array<PreTokenizerSpec, 2> kSpecs{{
    {"qwen2",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     true},
    {"qwen35",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     true},
}};

pcre2_code* Code(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

const PreTokenizerSpec& FindPreTokenizer(std::string_view name) {
  for (const PreTokenizerSpec& s : kSpecs) {
    if (s.name == name) return s;
  }
  std::string known;
  for (const PreTokenizerSpec& s : kSpecs)
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  Fail(
      "tokenizer.ggml.pre = '{}' is not a supported pre-tokenizer (supported: {}); convert the "
      "model with one of these or add its regex to src/tokenizer/pretokenizer.cc",
      name, known);
}

const PreTokenizerSpec* FindPreTokenizerByRegex(std::string_view regex) {
  for (const PreTokenizerSpec& s : kSpecs) {
    if (s.regex == regex) return &s;
  }
  return nullptr;
}

std::vector<std::string_view> PreTokenizerNames() {
  std::vector<std::string_view> names;
  for (const PreTokenizerSpec& s : kSpecs) names.push_back(s.name);
  return names;
}

Regex::Regex(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP makes \s, \d, \w and case folding Unicode-aware, as Oniguruma's defaults in HF are.
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    Fail("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})", offset,
         reinterpret_cast<const char*>(message.data()), pattern);
  }
  code_ = code;
  // JIT can be unavailable (e.g. W^X policies); plain matching stays correct, only slower.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(Code(code_)); }

Regex::MatchState::MatchState(const Regex& re)
    : re_(re), match_data_(pcre2_match_data_create_from_pattern(Code(re.code_), nullptr)) {
  if (match_data_ == nullptr) Fail("out of memory allocating PCRE2 match data");
}

Regex::MatchState::~MatchState() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
}

bool Regex::MatchState::Next(std::string_view text, size_t pos, size_t* start, size_t* end) {
  auto* md = static_cast<pcre2_match_data*>(match_data_);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = re_.jit_ ? pcre2_jit_match(Code(re_.code_), subject, text.size(), pos, 0, md, nullptr)
                    : pcre2_match(Code(re_.code_), subject, text.size(), pos, 0, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(rc, message.data(), message.size());
    Fail("pre-tokenizer regex failed at byte {} of a {}-byte text: {}", pos, text.size(),
         reinterpret_cast<const char*>(message.data()));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *start = ov[0];
  *end = ov[1];
  if (*start >= text.size()) return false;
  if (*end <= *start) {
    // An empty match would not advance; take one character as a piece instead.
    Utf8Step st = DecodeUtf8(text.data() + *start, text.size() - *start);
    *end = *start + st.length;
  }
  return true;
}

std::vector<std::string> Regex::SplitToVector(std::string_view text) const {
  std::vector<std::string> out;
  Split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

}  // namespace crossword::tokenizer
