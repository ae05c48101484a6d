// BuildSynthVocab: BPE training on an embedded corpus, deterministic filler merges, specials.
#include "tools/synth_vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "tools/chat_template.h"

namespace crossword::tools {
namespace {

// Text the merges are learned from (written for this project): prose, code, JSON, tool calls.
constexpr std::string_view kCorpus = R"corpus(
The quick brown fox jumps over the lazy dog. A language model reads text as tokens and predicts
the next one; a block diffusion model fills a whole block of masked slots at once and then checks
which of its guesses it is confident about. When the confidence of a slot is at least the
threshold, the slot is committed; the others are revisited in the next pass over the block.
What is the capital of Australia? The capital of Australia is Canberra, not Sydney or Melbourne.
Please think step by step, then answer in one word. The answer should be short and correct.
In the morning the weather in Lisbon was warmer than in Oslo, and the forecast for the weekend
said that it would rain in the north and stay sunny in the south of the country.
Engineers measure throughput in tokens per second and latency in milliseconds. They compare the
median of several runs after one warm-up run, because the first request on a fresh server is
often slower than the ones that follow it.
The recurrent state of a linear attention layer is a matrix per head; it decays over time and is
updated with a rank-one write for every token. The attention layers keep a cache of keys and
values for every position of the context, which grows with the length of the prompt.
def softmax(values):
    largest = max(values)
    exps = [math.exp(v - largest) for v in values]
    total = sum(exps)
    return [e / total for e in exps]

for (int i = 0; i < n; ++i) {
  sum += weights[i] * inputs[i];
}
return std::sqrt(sum / static_cast<float>(n));

{"name": "get_weather", "arguments": {"city": "Lisbon", "unit": "celsius"}}
{"role": "user", "content": "Is it warmer in Lisbon or in Oslo?"}
<tool_call>
<function=get_weather>
<parameter=city>
Oslo
</parameter>
</function>
</tool_call>
Numbers such as 2048, 131072 and 0.95 appear in configuration files, and so do names such as
block_size, threshold, expert_count and rope_freq_base. The model has forty layers, two hundred
and fifty six experts, and eight of them are used for every token together with a shared expert.
Once upon a time there was a small village at the edge of a forest. Every evening the children
gathered around the fire and listened to the stories of the old woman who lived by the river.
She told them about the stars, about the seasons, and about the people who had walked the roads
long before them. They asked many questions, and she answered every one of them with patience.
)corpus";

constexpr std::array<std::string_view, 26> kSpecialTokens = {"<|endoftext|>",
                                                             "<|im_start|>",
                                                             "<|im_end|>",
                                                             "<|object_ref_start|>",
                                                             "<|object_ref_end|>",
                                                             "<|box_start|>",
                                                             "<|box_end|>",
                                                             "<|quad_start|>",
                                                             "<|quad_end|>",
                                                             "<|vision_start|>",
                                                             "<|vision_end|>",
                                                             "<|vision_pad|>",
                                                             "<|image_pad|>",
                                                             "<|video_pad|>",
                                                             "<tool_call>",
                                                             "</tool_call>",
                                                             "<|fim_prefix|>",
                                                             "<|fim_middle|>",
                                                             "<|fim_suffix|>",
                                                             "<|fim_pad|>",
                                                             "<|repo_name|>",
                                                             "<|file_sep|>",
                                                             "<tool_response>",
                                                             "</tool_response>",
                                                             "<think>",
                                                             "</think>"};
constexpr std::string_view kMaskToken = "<|mask|>";

// splitmix64: a tiny, well-mixed deterministic generator for the filler merges.
struct SplitMix {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The GPT-2 byte-to-unicode table: printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100 onwards. Returned in token order (the order of GPT-2's first 256 tokens).
struct ByteTable {
  std::array<uint8_t, 256> byte_of_token;
  std::array<std::string, 256> text_of_byte;
  ByteTable() {
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    std::array<uint32_t, 256> cp{};
    for (int b : bs) cp[b] = static_cast<uint32_t>(b);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
        bs.push_back(b);
        cp[b] = 256 + static_cast<uint32_t>(extra++);
      }
    }
    for (int i = 0; i < 256; ++i) byte_of_token[i] = static_cast<uint8_t>(bs[i]);
    for (int b = 0; b < 256; ++b) AppendUtf8(&text_of_byte[b], cp[b]);
  }
};

const ByteTable& Bytes() {
  static const ByteTable table;  // immutable after construction
  return table;
}

bool IsLetter(unsigned char c) { return std::isalpha(c) || c >= 0x80; }
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsSpace(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A simplified Qwen pre-tokenizer, good enough to learn realistic merges: letter runs with one
// optional leading non-letter, single digits, punctuation runs with an optional leading space,
// and whitespace runs (the last space of a run joins the next word).
std::vector<std::string_view> PreTokenize(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  const size_t n = text.size();
  auto u = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  while (i < n) {
    const size_t start = i;
    const unsigned char c = u(i);
    if (IsLetter(c) || (!IsDigit(c) && c != '\n' && c != '\r' && i + 1 < n && IsLetter(u(i + 1)))) {
      ++i;
      while (i < n && IsLetter(u(i))) ++i;
    } else if (IsDigit(c)) {
      ++i;
    } else if (!IsSpace(c) || (c == ' ' && i + 1 < n && !IsSpace(u(i + 1)) && !IsDigit(u(i + 1)))) {
      ++i;
      while (i < n && !IsSpace(u(i)) && !IsLetter(u(i)) && !IsDigit(u(i))) ++i;
      while (i < n && (u(i) == '\n' || u(i) == '\r')) ++i;
    } else {
      while (i < n && IsSpace(u(i))) ++i;
      if (i < n && i - start > 1 && u(i - 1) == ' ') --i;
    }
    out.push_back(text.substr(start, i - start));
  }
  return out;
}

class Builder {
 public:
  explicit Builder(uint64_t seed) : rng_{seed ^ 0x5eed5eed12345678ull} {
    for (int i = 0; i < 256; ++i) Add(Bytes().text_of_byte[Bytes().byte_of_token[i]]);
  }

  void Train(int64_t target) {
    std::map<std::string, int64_t> counts;
    std::string corpus(kCorpus);
    corpus += ChatTemplateSource();
    for (std::string_view w : PreTokenize(corpus)) counts[std::string(w)]++;
    std::vector<std::vector<int32_t>> words;
    std::vector<int64_t> freq;
    for (const auto& [w, c] : counts) {
      std::vector<int32_t> sym;
      for (unsigned char b : w) sym.push_back(token_of_byte_[b]);
      words.push_back(std::move(sym));
      freq.push_back(c);
    }
    while (static_cast<int64_t>(tokens_.size()) < target) {
      std::unordered_map<uint64_t, int64_t> pairs;
      for (size_t w = 0; w < words.size(); ++w) {
        for (size_t k = 0; k + 1 < words[w].size(); ++k)
          pairs[Key(words[w][k], words[w][k + 1])] += freq[w];
      }
      uint64_t best = 0;
      int64_t best_count = 2;  // a merge must occur at least twice
      std::string best_text;
      for (const auto& [key, c] : pairs) {
        if (c < best_count) continue;
        std::string text = MergeText(key);
        if (c > best_count || best_text.empty() || text < best_text) {
          best = key;
          best_count = c;
          best_text = std::move(text);
        }
      }
      if (best_text.empty()) break;  // corpus exhausted
      const int32_t left = static_cast<int32_t>(best >> 32),
                    right = static_cast<int32_t>(best & 0xffffffff);
      const int32_t id = AddMerge(left, right);
      for (auto& sym : words) {
        for (size_t k = 0; k + 1 < sym.size(); ++k) {
          if (sym[k] == left && sym[k + 1] == right) {
            sym[k] = id;
            sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(k) + 1);
          }
        }
      }
    }
  }

  // Joins existing word pieces until `target` tokens: a letter piece (with or without the
  // leading-space marker) followed by a short letter piece without it.
  void Fill(int64_t target) {
    std::vector<int32_t> heads, tails;
    for (size_t i = 0; i < tokens_.size(); ++i) Classify(static_cast<int32_t>(i), &heads, &tails);
    int64_t attempts = 0;
    while (static_cast<int64_t>(tokens_.size()) < target) {
      Check(++attempts < 100 * target + 100000, "vocabulary synthesis stalled at {} tokens",
            tokens_.size());
      const int32_t a = heads[rng_.Next() % heads.size()];
      const int32_t b = tails[rng_.Next() % tails.size()];
      const std::string joined = tokens_[a] + tokens_[b];
      if (joined.size() > 24 || index_.contains(joined)) continue;
      Classify(AddMerge(a, b), &heads, &tails);
    }
  }

  SynthVocab Finish(const VocabShape& shape) {
    SynthVocab v;
    v.tokens = std::move(tokens_);
    v.types.assign(v.tokens.size(), kTokenNormal);
    v.merges = std::move(merges_);
    for (std::string_view s : kSpecialTokens) {
      const bool control = s.starts_with("<|");
      v.tokens.emplace_back(s);
      v.types.push_back(control ? kTokenControl : kTokenUserDefined);
    }
    v.endoftext_id = static_cast<int32_t>(shape.n_bpe);
    v.im_start_id = v.endoftext_id + 1;
    v.im_end_id = v.endoftext_id + 2;
    v.mask_id = static_cast<int32_t>(v.tokens.size());
    v.tokens.emplace_back(kMaskToken);
    v.types.push_back(kTokenControl);
    while (static_cast<int64_t>(v.tokens.size()) < shape.n_total) {
      v.tokens.push_back(fmt::format("[PAD{}]", v.tokens.size()));
      v.types.push_back(kTokenUnused);
    }
    return v;
  }

 private:
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  }
  std::string MergeText(uint64_t key) const {
    return tokens_[key >> 32] + " " + tokens_[key & 0xffffffff];
  }
  int32_t Add(std::string text) {
    const auto id = static_cast<int32_t>(tokens_.size());
    if (tokens_.size() < 256) token_of_byte_[Bytes().byte_of_token[id]] = id;
    index_.emplace(text, id);
    tokens_.push_back(std::move(text));
    return id;
  }
  int32_t AddMerge(int32_t a, int32_t b) {
    merges_.push_back(tokens_[a] + " " + tokens_[b]);
    return Add(tokens_[a] + tokens_[b]);
  }
  // Letter-only pieces (byte-level text of ASCII letters), optionally after one "Ġ".
  void Classify(int32_t id, std::vector<int32_t>* heads, std::vector<int32_t>* tails) const {
    std::string_view t = tokens_[id];
    const bool spaced = t.starts_with("\xc4\xa0");  // "Ġ"
    if (spaced) t.remove_prefix(2);
    if (t.empty() || !std::all_of(t.begin(), t.end(), [](char c) {
          return std::isalpha(static_cast<unsigned char>(c));
        })) {
      return;
    }
    heads->push_back(id);
    if (!spaced && t.size() <= 4) tails->push_back(id);
  }

  SplitMix rng_;
  std::vector<std::string> tokens_;
  std::vector<std::string> merges_;
  std::unordered_map<std::string, int32_t> index_;
  std::array<int32_t, 256> token_of_byte_{};
};

}  // namespace

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) out += Bytes().text_of_byte[b];
  return out;
}

SynthVocab BuildSynthVocab(const VocabShape& shape, uint64_t seed) {
  Check(shape.n_bpe >= 256 + 64, "vocabulary: {} BPE tokens is too few (need at least 320)",
        shape.n_bpe);
  const int64_t specials = static_cast<int64_t>(kSpecialTokens.size()) + 1;
  Check(shape.n_total >= shape.n_bpe + specials,
        "vocabulary: {} tokens cannot hold {} BPE tokens plus {} special tokens", shape.n_total,
        shape.n_bpe, specials);
  Builder b(seed);
  b.Train(shape.n_bpe);
  b.Fill(shape.n_bpe);
  return b.Finish(shape);
}

}  // namespace crossword::tools
