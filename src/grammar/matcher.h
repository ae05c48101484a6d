// Token-level grammar enforcement: the vocabulary as a byte trie, a compiled grammar with
// per-state token classes computed once and shared, and the per-request Matcher (allowed-token
// mask, accept, rollback, fork, can-end, forced bytes), in the shape of xgrammar's
// GrammarMatcher. docs/structured-output.md explains the algorithm and its measured speed.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/pda.h"

namespace crossword::grammar {

/// Bit `i` of a mask: word i / 64, bit i % 64.
inline bool MaskTest(std::span<const uint64_t> mask, int32_t i) {
  return (mask[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1;
}
inline void MaskSet(std::span<uint64_t> mask, int32_t i) {
  mask[static_cast<size_t>(i) >> 6] |= uint64_t{1} << (i & 63);
}

/// Bytes in 46 groups (controls, \t, \n, \r, space, each ASCII punctuation character, digits,
/// A-F, G-Z, a-f, g-z, UTF-8 continuation bytes, 2-, 3- and 4-byte lead bytes): bit ByteGroup(b)
/// of a mask stands for all bytes of b's group.
int ByteGroup(uint8_t b);
/// One step of strict UTF-8 decoding (the Unicode Standard's Table 3-7): state 0 is a character
/// boundary, 1..7 are inside a character, kUtf8Bad means the bytes are not UTF-8.
inline constexpr uint8_t kUtf8Bad = 15;
uint8_t Utf8Step(uint8_t state, uint8_t b);
/// The groups whose bytes all lie in `set`.
uint64_t ByteGroupMask(const ByteSet& set);

/// The model's vocabulary as grammars see it: the raw bytes of every token (byte-level BPE:
/// Tokenizer::TokenBytes), the ids a grammar never allows (control tokens such as <|im_start|>,
/// and tokens with no bytes), and the end-of-generation ids, which are allowed exactly when the
/// grammar can end. Immutable and shared by every grammar compiled for the model.
class TokenVocabulary {
 public:
  /// Throws crossword::Error when an id in `excluded` or `eos` is outside the vocabulary.
  TokenVocabulary(std::vector<std::string> tokens, std::span<const int32_t> excluded,
                  std::span<const int32_t> eos);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  size_t mask_words() const { return (tokens_.size() + 63) / 64; }
  std::string_view bytes(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  std::span<const int32_t> eos() const { return eos_; }
  bool IsEos(int32_t id) const;
  /// Tokens in the trie (not excluded, not EOS, at least one byte), as a mask.
  std::span<const uint64_t> trie_tokens() const { return trie_tokens_; }

  /// The trie in preorder, one record per node (a walk reads them in order): node i has the byte
  /// `byte` at depth `depth` (1 = first byte); its subtree is [i, end); the tokens spelled by
  /// the path to it are node_tokens[nodes[i].tok_begin .. nodes[i + 1].tok_begin) (a sentinel
  /// node ends the array), so a subtree's tokens are contiguous too. `below`: the byte groups
  /// (ByteGroupMask) of the nodes strictly inside the subtree; `height`: how many bytes deeper
  /// its deepest node is. They let a walk accept a whole subtree at once when the grammar state
  /// takes all of those bytes for that many steps.
  struct TrieNode {
    uint64_t below = 0;
    uint32_t end = 0;
    uint32_t tok_begin = 0;
    uint16_t depth = 0;
    uint16_t height = 0;
    uint8_t byte = 0;
    uint8_t utf8 = 0;  ///< kUtf8Boundary | kUtf8Below, and the decoder state (see vocab.cc)
  };
  /// The path to the node is valid UTF-8 ending at a character boundary.
  static constexpr uint8_t kUtf8Boundary = 0x10;
  /// Every path below the node stays a valid UTF-8 prefix.
  static constexpr uint8_t kUtf8Below = 0x20;
  struct Trie {
    std::vector<TrieNode> nodes;  ///< size() - 1 real nodes, then the sentinel
    std::vector<int32_t> node_tokens;
    size_t size() const { return nodes.size() - 1; }
  };
  const Trie& trie() const { return trie_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<int32_t> eos_;
  std::vector<uint64_t> trie_tokens_;
  Trie trie_;
};

/// What a grammar state does with each token, computed by walking the trie from that state with
/// the state's own rule frame only (xgrammar's context-independent tokens): a token is accepted
/// when its bytes are consumed inside the frame (callees included) or end exactly where the
/// frame completes; uncertain when some path completes the frame with bytes left over (the
/// caller decides: checked at run time); rejected otherwise.
struct TokenClasses {
  enum class Form : uint8_t {
    kAccepted,  ///< `ids` are the accepted tokens
    kRejected,  ///< every trie token except `ids` (which include the uncertain ones) is accepted
    kBitset,    ///< `bits` are the accepted tokens
  };
  Form form = Form::kAccepted;
  std::vector<int32_t> ids;
  std::vector<uint64_t> bits;
  /// (token, bytes consumed when the frame completed), sorted by token.
  std::vector<std::pair<int32_t, uint16_t>> uncertain;
  size_t n_accepted = 0;
};

/// A grammar compiled against a vocabulary. Thread-safe: token classes are computed on first
/// use under a lock and shared by every matcher of this grammar (compile once, use for many
/// requests).
class CompiledGrammar {
 public:
  CompiledGrammar(Pda pda, std::shared_ptr<const TokenVocabulary> vocab);

  const Pda& pda() const { return pda_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const std::shared_ptr<const TokenVocabulary>& vocab_ptr() const { return vocab_; }
  /// The token classes of PDA state `s` (a state with byte edges).
  const TokenClasses& Classes(uint32_t s) const;
  /// Bytes in each byte class.
  const std::vector<std::vector<uint8_t>>& class_bytes() const { return class_bytes_; }
  /// Computes every state's token classes now (benchmarks; a server may warm a cached grammar).
  void PrecomputeAll() const;

 private:
  TokenClasses Classify(uint32_t s) const;

  Pda pda_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<std::vector<uint8_t>> class_bytes_;
  std::vector<uint8_t> simple_;     // state has byte edges only: no calls, not final
  std::vector<uint8_t> root_only_;  // per rule: never called (only the root)
  std::vector<int32_t> ustep_;      // see the constructor
  std::vector<ByteSet> uset_;
  std::vector<uint64_t> ugroups_;
  std::vector<uint16_t> chain_;
  std::vector<uint8_t> utf8_loop_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<const TokenClasses>> classes_;
};

/// Parses GBNF text (ParseGbnf) and compiles it (CompileGrammar) against `vocab`.
std::shared_ptr<const CompiledGrammar> CompileGbnf(std::string_view text,
                                                   std::shared_ptr<const TokenVocabulary> vocab,
                                                   const GrammarLimits& limits = {});

/// One generation's position in a grammar. Not thread-safe; forks share internal caches and
/// must stay on the thread of their origin. Accepting a token that is not allowed leaves the
/// matcher unchanged and returns false.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  const CompiledGrammar& grammar() const { return *grammar_; }
  /// Words of a mask (vocabulary size / 64, rounded up).
  size_t mask_words() const { return grammar_->vocab().mask_words(); }

  /// Writes the set of tokens allowed next (bit per token id) into `mask` (mask_words() words):
  /// every token whose bytes keep the output a prefix of some string of the grammar, plus the
  /// EOS ids when the output so far is a complete string. After EOS was accepted: nothing.
  void FillMask(std::span<uint64_t> mask);
  /// Whether `token` may come next (without building a mask).
  bool IsAllowed(int32_t token);
  /// Advances by `token`; false (and no change) when it is not allowed.
  bool Accept(int32_t token);
  /// Advances by raw bytes (forced text, tests); false (and no change) when they do not fit.
  bool AcceptBytes(std::string_view bytes);
  /// Undoes the last `n` successful Accept/AcceptBytes calls (n <= num_accepted()).
  void Rollback(size_t n);
  /// Accept/AcceptBytes calls that can still be rolled back.
  size_t num_accepted() const { return history_.size() - 1; }
  /// A matcher at the same position whose history starts here (it cannot roll back past the
  /// fork). Cheap: shares the compiled grammar and caches.
  Matcher Fork() const;
  /// The output so far is a complete string of the grammar (EOS is allowed).
  bool CanEnd() const;
  /// EOS was accepted: no token is allowed any more.
  bool Terminated() const { return history_.back().terminated; }
  /// Bytes every continuation must start with (jump-forward), up to `max_bytes`; empty when the
  /// next byte is not forced or the output can end here.
  std::string ForcedBytes(size_t max_bytes = 256);

  /// Counters for benchmarks.
  struct Stats {
    int64_t masks = 0, mask_cache_hits = 0, uncertain_checked = 0;
  };
  const Stats& stats() const;

 private:
  struct Context;
  struct Position {
    std::vector<uint32_t> live;  // stack nodes (sorted); node 0 = the empty stack: can end
    bool terminated = false;
  };
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<Context> ctx,
          Position pos);
  bool Feed(const Position& from, std::string_view bytes, Position& to);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<Context> ctx_;
  std::vector<Position> history_;
};

}  // namespace crossword::grammar
