// Grammars over bytes: the expression-tree form every front end produces (GBNF text, JSON
// Schema), the GBNF parser and printer, and the errors they raise. The token matcher that
// enforces a grammar during decoding is in grammar/matcher.h; docs/structured-output.md describes
// the supported syntax and limits.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"

namespace crossword::grammar {

/// Why a grammar or schema was refused (all are the caller's fault: HTTP 400).
enum class ErrorKind : uint8_t {
  kSyntax,         ///< malformed GBNF text or regular expression
  kUndefinedRule,  ///< a rule is used but never defined, or there is no `root`
  kLeftRecursion,  ///< a rule can reach itself without consuming a byte
  kEmpty,          ///< the grammar (or schema) admits no string at all
  kTooLarge,       ///< a size, depth or automaton limit was exceeded
  kUnsupported,    ///< a construct or JSON Schema keyword outside the supported subset
};

/// The error of this library: a crossword::RequestError (the request's grammar or schema is at
/// fault, also when the matcher refuses one while decoding) whose message is a complete sentence
/// (with "line L, column C" for GBNF text and a JSON pointer for schemas) plus a machine-readable
/// kind.
class GrammarError : public RequestError {
 public:
  GrammarError(ErrorKind kind, const std::string& message) : RequestError(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void FailGrammar(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw GrammarError(kind, fmt::format(format, std::forward<Args>(args)...));
}

/// A set of byte values (bit b of word b / 64).
struct ByteSet {
  std::array<uint64_t, 4> w{};
  void Set(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void SetRange(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) Set(static_cast<uint8_t>(b));
  }
  bool Has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  bool Empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

inline constexpr uint32_t kUnbounded = UINT32_MAX;

enum class NodeKind : uint8_t {
  kBytes,   ///< one byte from `bytes` (an empty set matches nothing)
  kRef,     ///< the rule `rule`
  kSeq,     ///< `kids` in order (no kids: the empty string)
  kAlt,     ///< one of `kids` (no kids: nothing)
  kRepeat,  ///< kids[0] repeated [min, max] times (max may be kUnbounded)
};

/// One node of a rule body. Nodes live in Grammar::nodes and refer to each other by index; a
/// node may be shared by several parents (the tree is a DAG).
struct Node {
  NodeKind kind = NodeKind::kSeq;
  ByteSet bytes;
  uint32_t rule = 0;
  uint32_t min = 0, max = 0;
  std::vector<uint32_t> kids;
};

/// A named rule. `line`/`column` locate its definition (1-based; 0 when built in code).
struct Rule {
  std::string name;
  uint32_t body = 0;
  bool defined = false;
  uint32_t line = 0, column = 0;
};

/// A context-free grammar over bytes. Code points are spelled as their UTF-8 byte sequences, so
/// a character class such as [^"] becomes an alternation of byte sequences, and every string it
/// admits is valid UTF-8 unless a byte-level class says otherwise.
struct Grammar {
  std::vector<Node> nodes;
  std::vector<Rule> rules;
  std::unordered_map<std::string, uint32_t> rule_index;  ///< name -> index in `rules`
  uint32_t root = 0;

  uint32_t AddNode(Node node);
  uint32_t Bytes(const ByteSet& set);
  uint32_t Byte(uint8_t b);
  uint32_t Literal(std::string_view bytes);  ///< the byte string itself
  uint32_t Ref(uint32_t rule);
  uint32_t Seq(std::vector<uint32_t> kids);
  uint32_t Alt(std::vector<uint32_t> kids);
  uint32_t Repeat(uint32_t kid, uint32_t min, uint32_t max);
  /// Any code point in the inclusive ranges (surrogates U+D800..DFFF excluded), as UTF-8.
  uint32_t Codepoints(std::vector<std::pair<char32_t, char32_t>> ranges, bool negate = false);
  /// Index of the rule called `name`, added (undefined) when new.
  uint32_t RuleId(std::string_view name);
};

/// Bounds applied to untrusted grammar text before anything recursive touches it.
struct GrammarLimits {
  size_t max_text_bytes = 256 * 1024;  ///< GBNF source size
  uint32_t max_nesting = 64;           ///< parentheses inside one rule
  uint32_t max_repeat = 10000;         ///< m and n of {m,n}
  /// Automaton states after expanding repetitions and inlining (NFA) and after determinizing
  /// (DFA), summed over all rules.
  size_t max_nfa_states = 2'000'000;
  size_t max_dfa_states = 500'000;
  /// Determinizing's memory and time: NFA states held by all DFA states' sets, and NFA states
  /// visited by all epsilon closures plus byte classes scanned per labelled edge. Nested bounded
  /// repetitions such as
  /// ((x{0,100}){0,100}){0,100} stay under the state limits above but make every set and closure
  /// ~10^6 states long (21 GB and minutes before these bounds).
  size_t max_dfa_set_states = 8'000'000;
  uint64_t max_closure_steps = 200'000'000;
};

/// Parses llama.cpp's GBNF: `name ::= alternatives` rules (names are letters, digits and '-'),
/// `|`, `( )`, `*` `+` `?` `{m}` `{m,}` `{m,n}` (and `{,n}`), "literals" and [classes] (with
/// ranges, `^` negation and the escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH), `.` (any
/// code point), and `#` comments. A newline ends a rule except inside parentheses or after `|`.
/// The start rule is `root`. Throws GrammarError with the line and column of the problem for
/// malformed text, an undefined rule, a missing root, a rule defined twice, or text/nesting/
/// repetition beyond `limits`. Token references (<[id]>, <text>) are refused as unsupported.
Grammar ParseGbnf(std::string_view text, const GrammarLimits& limits = {});

}  // namespace crossword::grammar
