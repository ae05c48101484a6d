// Tokenizer construction, encoding (added tokens, NFC, pre-tokenizer, cached BPE), decoding and
// the streaming decoder (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "base/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace crossword::tokenizer {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Piece -> ids memo shared by all threads. Sharded so concurrent encoders rarely contend; each
// shard is cleared when full (cheap, and bounded memory without LRU bookkeeping).
class PieceCache {
 public:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 1 << 14;
  static constexpr size_t kMaxPieceBytes = 128;  // longer pieces are rare; not worth caching

  bool Lookup(std::string_view piece, size_t hash, std::vector<int32_t>& out) const {
    Shard& s = shards_[hash % kShards];
    std::lock_guard lock(s.mu);
    auto it = s.map.find(piece);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void Insert(std::string_view piece, size_t hash, std::span<const int32_t> ids) const {
    Shard& s = shards_[hash % kShards];
    std::lock_guard lock(s.mu);
    if (s.map.size() >= kMaxEntriesPerShard) s.map.clear();
    s.map.emplace(std::string(piece), std::vector<int32_t>(ids.begin(), ids.end()));
  }

 private:
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

struct AddedToken {
  std::string_view text;
  int32_t id;
  bool control;  // matched only with parse_special
};

constexpr std::string_view kEogTexts[] = {"<|im_end|>",    "<|endoftext|>", "<|eot_id|>",
                                          "<|end|>",       "<end_of_turn>", "<|fim_pad|>",
                                          "<|repo_name|>", "<|file_sep|>"};

}  // namespace

struct Tokenizer::Impl {
  std::string pre_name;
  const PreTokenizerSpec* pre = nullptr;
  std::unique_ptr<Regex> regex;
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<std::string> bytes;  // what each token decodes to
  std::unordered_map<std::string_view, int32_t> text_to_id;
  MergeTable merges;
  std::array<int32_t, 256> byte_ids{};
  std::vector<AddedToken> added;                            // longest first
  std::array<std::vector<uint32_t>, 256> added_by_first{};  // indices into `added`
  SpecialTokens special;
  std::vector<int32_t> eog;
  bool add_bos = false;
  PieceCache cache;

  void CheckId(int32_t id) const {
    Check(id >= 0 && static_cast<size_t>(id) < tokens.size(),
          "token id {} is outside the vocabulary [0, {})", id, tokens.size());
  }
  void EncodeSegment(std::string_view text, std::vector<int32_t>& out) const;
  void EncodePiece(std::string_view piece, std::vector<int32_t>& out) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::FromVocabulary(const Vocabulary& vocab) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  Check(vocab.model == "gpt2",
        "tokenizer.ggml.model = '{}' is not supported; only byte-level BPE ('gpt2') is",
        vocab.model);
  t.pre_name = vocab.pre;
  t.pre = &FindPreTokenizer(vocab.pre);
  t.regex = std::make_unique<Regex>(t.pre->regex);
  Check(!vocab.tokens.empty(), "tokenizer.ggml.tokens is empty");
  Check(vocab.types.empty() || vocab.types.size() == vocab.tokens.size(),
        "tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}",
        vocab.types.size(), vocab.tokens.size());
  t.tokens = vocab.tokens;
  t.types = vocab.types.empty() ? std::vector<TokenType>(t.tokens.size(), TokenType::kNormal)
                                : vocab.types;
  const int32_t n = static_cast<int32_t>(t.tokens.size());
  t.text_to_id.reserve(t.tokens.size());
  t.bytes.resize(t.tokens.size());
  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = t.tokens[id];
    t.text_to_id.emplace(text, id);  // first occurrence wins on duplicates
    switch (t.types[id]) {
      case TokenType::kNormal:
      case TokenType::kUndefined:
      case TokenType::kUnknown:
        if (!ByteLevelToBytes(text, t.bytes[id])) t.bytes[id] = text;  // not byte-level: raw
        break;
      case TokenType::kControl:
      case TokenType::kUserDefined:
        t.bytes[id] = text;
        if (!text.empty()) t.added.push_back({text, id, t.types[id] == TokenType::kControl});
        break;
      case TokenType::kByte: {
        unsigned value = 0;
        if (text.size() == 6 && std::sscanf(text.c_str(), "<0x%2X>", &value) == 1) {
          t.bytes[id] = std::string(1, static_cast<char>(value));
        } else {
          t.bytes[id] = text;
        }
        break;
      }
      case TokenType::kUnused:
        break;
    }
  }
  // Byte-level symbols: every byte must have a token, or some inputs could not be encoded.
  const ByteLevelAlphabet& alphabet = ByteLevel();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    AppendUtf8(alphabet.byte_to_cp[b], symbol);
    auto it = t.text_to_id.find(symbol);
    Check(it != t.text_to_id.end(),
          "tokenizer.ggml.tokens has no token for byte 0x{:02X} (byte-level symbol '{}'); a "
          "byte-level BPE vocabulary needs all 256",
          b, symbol);
    t.byte_ids[b] = it->second;
  }
  t.merges.Reserve(vocab.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    size_t space = m.find(' ', 1);
    Check(space != std::string::npos && space + 1 < m.size() &&
              m.find(' ', space + 1) == std::string::npos,
          "tokenizer.ggml.merges[{}] = '{}' is not 'LEFT RIGHT' (two tokens, one space)", rank, m);
    std::string_view left(m.data(), space), right(m.data() + space + 1, m.size() - space - 1);
    joined.assign(left).append(right);
    auto l = t.text_to_id.find(left), r = t.text_to_id.find(right), j = t.text_to_id.find(joined);
    Check(l != t.text_to_id.end() && r != t.text_to_id.end() && j != t.text_to_id.end(),
          "tokenizer.ggml.merges[{}] = '{}': token '{}' is not in tokenizer.ggml.tokens", rank, m,
          l == t.text_to_id.end()   ? left
          : r == t.text_to_id.end() ? right
                                    : joined);
    t.merges.Insert(l->second, r->second, static_cast<int32_t>(rank), j->second);
  }
  // Added tokens: longest first, so the first hit at a position is the longest (leftmost-longest).
  std::stable_sort(t.added.begin(), t.added.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.text.size() > b.text.size();
  });
  for (uint32_t i = 0; i < t.added.size(); ++i) {
    t.added_by_first[static_cast<uint8_t>(t.added[i].text[0])].push_back(i);
  }
  // Special ids.
  auto check_special = [&](const std::optional<int32_t>& id, std::string_view what) {
    if (id) {
      Check(*id >= 0 && *id < n, "tokenizer.ggml.{}_token_id = {} is outside the vocabulary of {}",
            what, *id, n);
    }
    return id;
  };
  SpecialTokens& s = t.special;
  s.bos = check_special(vocab.bos, "bos");
  s.eos = check_special(vocab.eos, "eos");
  s.eot = check_special(vocab.eot, "eot");
  s.pad = check_special(vocab.pad, "padding");
  s.mask = check_special(vocab.mask, "mask");
  auto find = [&](std::string_view text) -> std::optional<int32_t> {
    auto it = t.text_to_id.find(text);
    if (it == t.text_to_id.end()) return std::nullopt;
    return it->second;
  };
  s.im_start = find("<|im_start|>");
  s.im_end = find("<|im_end|>");
  s.endoftext = find("<|endoftext|>");
  s.think = find("<think>");
  s.think_end = find("</think>");
  s.tool_call = find("<tool_call>");
  s.tool_call_end = find("</tool_call>");
  s.tool_response = find("<tool_response>");
  s.tool_response_end = find("</tool_response>");
  if (!s.mask) s.mask = find("<|mask|>");
  if (s.eos) t.eog.push_back(*s.eos);
  if (s.eot) t.eog.push_back(*s.eot);
  for (std::string_view text : kEogTexts) {
    auto id = find(text);
    if (id && (t.types[*id] == TokenType::kControl || t.types[*id] == TokenType::kUserDefined)) {
      t.eog.push_back(*id);
    }
  }
  std::sort(t.eog.begin(), t.eog.end());
  t.eog.erase(std::unique(t.eog.begin(), t.eog.end()), t.eog.end());
  t.add_bos = vocab.add_bos;
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::EncodePiece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids[static_cast<uint8_t>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
  size_t hash = 0;
  if (cacheable) {
    hash = StringHash{}(piece);
    if (cache.Lookup(piece, hash, out)) return;
  }
  // Each byte starts as its byte-level symbol (HF builds the word from the byte-level chars).
  std::array<int32_t, PieceCache::kMaxPieceBytes> small;
  std::vector<int32_t> large;
  std::span<int32_t> symbols;
  if (cacheable) {
    symbols = std::span<int32_t>(small.data(), piece.size());
  } else {
    large.resize(piece.size());
    symbols = large;
  }
  for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_ids[static_cast<uint8_t>(piece[i])];
  size_t first = out.size();
  BpeMerge(symbols, merges, out);
  if (cacheable) cache.Insert(piece, hash, std::span<const int32_t>(out).subspan(first));
}

void Tokenizer::Impl::EncodeSegment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized;
  if (pre->nfc && !IsNfcQuick(text)) {
    AppendNfc(text, normalized);
    text = normalized;
  }
  regex->Split(text, [&](std::string_view piece) { EncodePiece(piece, out); });
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  EncodeAppend(text, parse_special, out);
  return out;
}

void Tokenizer::EncodeAppend(std::string_view text, bool parse_special,
                             std::vector<int32_t>& out) const {
  const Impl& t = *impl_;
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto& bucket = t.added_by_first[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (uint32_t i : bucket) {
      const AddedToken& a = t.added[i];
      if (a.control && !parse_special) continue;
      if (text.size() - pos >= a.text.size() &&
          std::memcmp(text.data() + pos, a.text.data(), a.text.size()) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    t.EncodeSegment(text.substr(segment, pos - segment), out);
    out.push_back(hit->id);
    pos += hit->text.size();
    segment = pos;
  }
  t.EncodeSegment(text.substr(segment), out);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    impl_->CheckId(id);
    if (!render_special && impl_->types[id] == TokenType::kControl) continue;
    out.append(impl_->bytes[id]);
  }
  return out;
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  impl_->CheckId(id);
  return impl_->tokens[id];
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  impl_->CheckId(id);
  return impl_->bytes[id];
}

TokenType Tokenizer::GetTokenType(int32_t id) const {
  impl_->CheckId(id);
  return impl_->types[id];
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->tokens.size()); }

std::optional<int32_t> Tokenizer::FindToken(std::string_view text) const {
  auto it = impl_->text_to_id.find(text);
  if (it == impl_->text_to_id.end()) return std::nullopt;
  return it->second;
}

const SpecialTokens& Tokenizer::special() const { return impl_->special; }
std::span<const int32_t> Tokenizer::eog_ids() const { return impl_->eog; }
bool Tokenizer::IsEog(int32_t id) const {
  return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}
std::string_view Tokenizer::pre() const { return impl_->pre_name; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::regex_jit() const { return impl_->regex->jit(); }

std::vector<std::string> Tokenizer::PreTokenize(std::string_view text) const {
  std::string normalized;
  if (impl_->pre->nfc) {
    AppendNfc(text, normalized);
    text = normalized;
  }
  return impl_->regex->SplitToVector(text);
}

// ---- StreamDecoder ------------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(&tokenizer), render_special_(render_special) {}

std::string StreamDecoder::Feed(int32_t id) { return Feed(std::span<const int32_t>(&id, 1)); }

std::string StreamDecoder::Feed(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (!render_special_ && tokenizer_->GetTokenType(id) == TokenType::kControl) continue;
    pending_.append(tokenizer_->TokenBytes(id));
  }
  return Drain(false);
}

std::string StreamDecoder::Flush() { return Drain(true); }

std::string StreamDecoder::Drain(bool at_end) {
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    if (static_cast<uint8_t>(pending_[i]) < 0x80) {
      out.push_back(pending_[i++]);
      continue;
    }
    Utf8Step st = DecodeUtf8(pending_.data() + i, pending_.size() - i);
    if (st.status == Utf8Step::kIncomplete && !at_end) break;  // wait for the next bytes
    if (st.status == Utf8Step::kValid) {
      out.append(pending_, i, st.length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.length;
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace crossword::tokenizer
