// A grammar compiled for matching: one deterministic automaton per rule over byte classes, with
// call edges into other rules (a recursive transition network, i.e. a pushdown automaton whose
// stack holds return states). Rules that are not recursive are inlined into their callers first,
// so a grammar without recursion (most JSON schemas) becomes a single DFA.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace crossword::grammar {

struct Pda {
  /// A call edge: enter the callee at state `start`; when it completes, continue at `ret` (a
  /// state of the caller). `tail`: `ret` can only complete (final, no edges), so the caller's
  /// frame need not be kept.
  struct Call {
    uint32_t start = 0;
    uint32_t ret = 0;
    bool tail = false;
  };
  enum Flag : uint8_t { kFinal = 1, kHasBytes = 2 };

  uint32_t n_states = 0;
  uint32_t n_classes = 0;
  std::array<uint8_t, 256> byte_class{};  ///< byte -> class; bytes of a class behave alike
  std::vector<int32_t> next;              ///< [state * n_classes + class] -> state, -1: none
  std::vector<uint8_t> flags;             ///< Flag bits per state
  std::vector<uint32_t> call_begin;       ///< calls of state s: [call_begin[s], call_begin[s+1])
  std::vector<Call> calls;
  std::vector<uint32_t> state_rule;  ///< index into rule_names
  std::vector<std::string> rule_names;
  uint32_t start = 0;  ///< the root rule's start state

  int32_t Next(uint32_t s, uint8_t byte) const {
    return next[static_cast<size_t>(s) * n_classes + byte_class[byte]];
  }
  bool Final(uint32_t s) const { return flags[s] & kFinal; }
  bool HasBytes(uint32_t s) const { return flags[s] & kHasBytes; }
};

/// Compiles `g`: checks that no rule is left-recursive (llama.cpp refuses those too) and that
/// the root admits at least one string, drops alternatives that can never complete, inlines
/// non-recursive rules, and determinizes each remaining rule. Every state of the result can
/// reach the end of its rule, so a matcher never gets stuck in a state no input completes.
/// Throws GrammarError (kLeftRecursion, kEmpty, kTooLarge) naming the rule.
Pda CompileGrammar(const Grammar& g, const GrammarLimits& limits = {});

}  // namespace crossword::grammar
