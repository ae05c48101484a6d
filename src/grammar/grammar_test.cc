// GBNF parsing and errors, compilation, and the matcher: byte-level acceptance, masks equal to
// trying every token, rollback, fork, forced bytes.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "grammar/gbnf_text.h"
#include "grammar/matcher.h"

namespace crossword::grammar {
namespace {

// 256 single-byte tokens (id = byte), then `extra`, then EOS.
std::shared_ptr<const TokenVocabulary> ByteVocab(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.emplace_back(1, static_cast<char>(b));
  for (const auto& e : extra) toks.push_back(e);
  const int32_t eos = static_cast<int32_t>(toks.size());
  toks.emplace_back("<eos>");
  std::vector<int32_t> eos_ids{eos};
  return std::make_shared<const TokenVocabulary>(std::move(toks), std::span<const int32_t>(),
                                                 eos_ids);
}

bool Matches(const std::string& gbnf, std::string_view text) {
  static const auto vocab = ByteVocab();
  Matcher m(CompileGbnf(gbnf, vocab));
  return m.AcceptBytes(text) && m.CanEnd();
}

ErrorKind KindOf(const std::string& gbnf, std::string* message = nullptr) {
  try {
    CompileGbnf(gbnf, ByteVocab());
  } catch (const GrammarError& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no error for: " << gbnf;
  return ErrorKind::kSyntax;
}

TEST(Gbnf, LiteralsClassesAndRepetition) {
  const std::string g = R"g(root ::= "a" [b-d]+ "x"? ("y" | "zz"){2} [^\n]{0,2} # comment
)g";
  EXPECT_TRUE(Matches(g, "abyy"));
  EXPECT_TRUE(Matches(g, "abcdxzzy!!"));
  EXPECT_FALSE(Matches(g, "ayy"));   // + needs one
  EXPECT_TRUE(Matches(g, "abyyy"));  // {2}, then [^\n]{0,2} takes the third y
  EXPECT_FALSE(Matches(g, "abzzz"));
  EXPECT_FALSE(Matches(g, "abyy\n"));   // negated class
  EXPECT_FALSE(Matches(g, "abyy123"));  // at most 2
}

TEST(Gbnf, UnicodeClassesAreCodePoints) {
  const std::string g = "root ::= [ぁ-ゟ]+ [^a] .\n";
  EXPECT_TRUE(Matches(g, "ひらがなéx"));
  EXPECT_TRUE(Matches(g, "あ😀😀"));
  EXPECT_FALSE(Matches(g, "あax"));
  EXPECT_FALSE(Matches(g, "あ\xC3"));  // half a character never completes
  EXPECT_FALSE(Matches(g, "A😀x"));
  // Escapes name code points, not bytes.
  EXPECT_TRUE(Matches("root ::= \"\\u00e9\\x41\\U0001F600\"\n", "éA😀"));
}

TEST(Gbnf, NewlinesInsideGroupsAndAfterBar) {
  const std::string g = "root ::= (\n  \"a\"\n  | \"b\"\n) tail\ntail ::= \"x\" |\n  \"y\"\n";
  EXPECT_TRUE(Matches(g, "ax"));
  EXPECT_TRUE(Matches(g, "by"));
  EXPECT_FALSE(Matches(g, "a"));
}

TEST(Gbnf, RecursionAndEmptyAlternatives) {
  const std::string g = R"g(root ::= expr
expr ::= term ("+" term)*
term ::= [0-9]+ | "(" expr ")"
)g";
  EXPECT_TRUE(Matches(g, "1+(2+3)+((4))"));
  EXPECT_FALSE(Matches(g, "1+(2+3"));
  EXPECT_FALSE(Matches(g, "1++2"));
  EXPECT_TRUE(Matches("root ::= \"a\" root | \n", "aaa"));
  EXPECT_TRUE(Matches("root ::= \"a\" root | \n", ""));
}

TEST(Gbnf, ErrorsNameTheLineAndColumn) {
  std::string msg;
  EXPECT_EQ(KindOf("root ::= \"a\" (\"b\"\n", &msg), ErrorKind::kSyntax);
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_EQ(KindOf("root ::= \"a\"\nx ::= [a-\n", &msg), ErrorKind::kSyntax);
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_EQ(KindOf("root ::= \"\\q\"\n", &msg), ErrorKind::kSyntax);
  EXPECT_NE(msg.find("line 1, column 11"), std::string::npos) << msg;
  EXPECT_EQ(KindOf("root ::= * \"a\"\n", &msg), ErrorKind::kSyntax);
  EXPECT_EQ(KindOf("root = \"a\"\n", &msg), ErrorKind::kSyntax);
  EXPECT_NE(msg.find("::="), std::string::npos) << msg;
  EXPECT_EQ(KindOf("root ::= \"a\"{3,1}\n", &msg), ErrorKind::kSyntax);
  EXPECT_EQ(KindOf("root ::= \"a\"\nroot ::= \"b\"\n", &msg), ErrorKind::kSyntax);
  EXPECT_NE(msg.find("defined twice"), std::string::npos) << msg;
}

TEST(Gbnf, UndefinedRulesAndMissingRoot) {
  std::string msg;
  EXPECT_EQ(KindOf("root ::= item\n", &msg), ErrorKind::kUndefinedRule);
  EXPECT_NE(msg.find("'item'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 1, column 10"), std::string::npos) << msg;
  EXPECT_EQ(KindOf("start ::= \"a\"\n", &msg), ErrorKind::kUndefinedRule);
  EXPECT_NE(msg.find("root"), std::string::npos) << msg;
}

TEST(Gbnf, LeftRecursionIsRefused) {
  std::string msg;
  EXPECT_EQ(KindOf("root ::= root \"a\" | \"b\"\n", &msg), ErrorKind::kLeftRecursion);
  EXPECT_NE(msg.find("root -> root"), std::string::npos) << msg;
  // Through another rule and a nullable prefix.
  EXPECT_EQ(KindOf("root ::= x\nx ::= \"a\"? y\ny ::= [b]* x \"c\" | \"d\"\n", &msg),
            ErrorKind::kLeftRecursion);
  EXPECT_NE(msg.find("x -> y -> x"), std::string::npos) << msg;
}

TEST(Gbnf, EmptyLanguageIsRefused) {
  std::string msg;
  EXPECT_EQ(KindOf("root ::= \"a\" loop\nloop ::= \"b\" loop\n", &msg), ErrorKind::kEmpty);
  EXPECT_NE(msg.find("'loop'"), std::string::npos) << msg;
  // An impossible alternative is dropped, the rest still works.
  EXPECT_TRUE(Matches("root ::= \"a\" loop | \"c\"\nloop ::= \"b\" loop\n", "c"));
  EXPECT_FALSE(Matches("root ::= \"a\" loop | \"c\"\nloop ::= \"b\" loop\n", "ab"));
}

TEST(Gbnf, LimitsAreEnforcedBeforeRecursion) {
  std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_EQ(KindOf(deep + "\n"), ErrorKind::kTooLarge);
  EXPECT_EQ(KindOf("root ::= \"a\"" + std::string(100000, '*') + "\n"), ErrorKind::kTooLarge);
  EXPECT_EQ(KindOf("root ::= \"a\"{99999999}\n"), ErrorKind::kTooLarge);
  EXPECT_EQ(KindOf("root ::= \"" + std::string(300000, 'a') + "\"\n"), ErrorKind::kTooLarge);
  // Expansion that would need millions of states.
  EXPECT_EQ(KindOf("root ::= ((\"a\"{1000}){1000}){1000}\n"), ErrorKind::kTooLarge);
  EXPECT_EQ(KindOf("root ::= <[12]>\n"), ErrorKind::kUnsupported);
}

// Optional repetitions nested three deep stay under the state limits (10^6 NFA states) but make
// every determinized set ~10^6 states long: refused by the work bounds in about a second, where
// they took minutes and tens of GB before.
TEST(Gbnf, NestedOptionalRepetitionIsBoundedInTimeAndMemory) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  EXPECT_EQ(KindOf("root ::= (((\"a\"{0,100}){0,100}){0,100})\n", &msg), ErrorKind::kTooLarge);
  EXPECT_NE(msg.find("repetition"), std::string::npos) << msg;
  EXPECT_EQ(KindOf("root ::= (\"a\"{0,1000}){0,1000}\n"), ErrorKind::kTooLarge);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 30.0) << "the bounds should stop these within a few seconds";
  // Smaller nestings of the same shape still compile and match.
  EXPECT_TRUE(Matches("root ::= ((\"a\"{0,3}){0,3}){0,3} \"b\"\n", std::string(27, 'a') + "b"));
  EXPECT_FALSE(Matches("root ::= ((\"a\"{0,3}){0,3}){0,3} \"b\"\n", std::string(28, 'a') + "b"));
}

// Two alternatives calling different (recursive, so not inlined) rules at every level: the
// parses double with each "x". The matcher refuses the grammar once 8192 are alive, instead of
// growing to GBs (2^30 stacks); short inputs of the same grammar still match.
TEST(Matcher, AmbiguityAcrossRulesIsBounded) {
  const std::string g =
      "root ::= a\n"
      "a ::= \"x\" a \"y\" | \"x\" b \"z\" | \"x\"\n"
      "b ::= \"x\" a \"w\" | \"x\" b \"v\" | \"x\"\n";
  EXPECT_TRUE(Matches(g, "xxy"));
  EXPECT_TRUE(Matches(g, "xxxvz"));
  EXPECT_FALSE(Matches(g, "xxyy"));
  Matcher m(CompileGbnf(g, ByteVocab()));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(m.AcceptBytes("x")) << i;
    ADD_FAILURE() << "40 nested levels accepted without a bound";
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTooLarge);
    EXPECT_NE(std::string(e.what()).find("ambiguous"), std::string::npos) << e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0);
}

// Every token the mask allows is accepted and every other one refused, on random walks over
// recursive grammars with multi-byte tokens that cross rule boundaries.
TEST(Matcher, MaskEqualsTryingEveryToken) {
  const std::vector<std::string> grammars = {
      R"g(root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ":" ws value ws ("," ws string ":" ws value ws)* )? "}"
array ::= "[" ws ( value ws ("," ws value ws)* )? "]"
string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \n]?
)g",
      R"g(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor ("*" factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)g",
      "root ::= (\"ab\" | \"abc\" | [a-c]{2,4})+ \"!\"\n",
  };
  std::vector<std::string> extra = {
      "{\"", "\":", "\",",  "\"}",   "}]",   "[{",   "true", "tr", "ue}", "null]", "12",  "3.",
      ".5",  "\\n", "\\\"", "\"a\"", "ab",   "abc",  "c!",   "((", "))",  "1+",    "*(",  "2)",
      ")*",  "-(",  "é",    "\xC3",  "\xA9", ", \"", "\n]",  " ",  "[]",  "{}",    "a\"", "\":{"};
  std::mt19937 rng(7);
  auto vocab = ByteVocab(extra);
  int64_t steps = 0, uncertain = 0;
  for (const std::string& g : grammars) {
    auto compiled = CompileGbnf(g, vocab);
    for (int walk = 0; walk < 20; ++walk) {
      Matcher m(compiled);
      std::vector<uint64_t> mask(m.mask_words());
      for (int step = 0; step < 40 && !m.Terminated(); ++step) {
        m.FillMask(mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id) {
          const bool in_mask = MaskTest(mask, id);
          ASSERT_EQ(in_mask, m.IsAllowed(id)) << "grammar " << g << " token " << id << " '"
                                              << vocab->bytes(id) << "' step " << step;
          if (in_mask) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty()) << "stuck at step " << step;
        // End only when nothing else fits, so walks get deep.
        if (allowed.size() > 1 && vocab->IsEos(allowed.back())) allowed.pop_back();
        const int32_t pick = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.Accept(pick));
        ++steps;
      }
      uncertain += m.stats().uncertain_checked;
    }
  }
  // The walks went deep and exercised the run-time checks of context-dependent tokens.
  EXPECT_GT(steps, 1000);
  EXPECT_GT(uncertain, 300);
}

TEST(Matcher, RollbackForkAndForcedBytes) {
  auto vocab = ByteVocab({"{\"name\":\"", "\"}"});
  auto g = CompileGbnf("root ::= \"{\\\"name\\\":\\\"\" [a-z]+ \"\\\"}\"\n", vocab);
  Matcher m(g);
  EXPECT_EQ(m.ForcedBytes(), "{\"name\":\"");
  const int32_t open = 256, close = 257, eos = 258;
  EXPECT_TRUE(m.Accept(open));
  EXPECT_FALSE(m.Accept('A'));
  EXPECT_TRUE(m.Accept('a'));
  EXPECT_FALSE(m.CanEnd());
  Matcher f = m.Fork();
  EXPECT_TRUE(f.Accept(close));
  EXPECT_TRUE(f.CanEnd());
  EXPECT_TRUE(f.Accept(eos));
  EXPECT_TRUE(f.Terminated());
  EXPECT_FALSE(f.Accept('a'));
  EXPECT_FALSE(m.CanEnd());  // the fork did not move the original
  EXPECT_TRUE(m.Accept('b'));
  EXPECT_EQ(m.num_accepted(), 3u);
  m.Rollback(2);
  EXPECT_EQ(m.ForcedBytes(), "");
  EXPECT_FALSE(m.IsAllowed(close));
  EXPECT_TRUE(m.IsAllowed('z'));
  EXPECT_THROW(m.Rollback(5), Error);
  std::vector<uint64_t> mask(m.mask_words());
  m.FillMask(mask);
  EXPECT_FALSE(MaskTest(mask, eos));
  EXPECT_TRUE(MaskTest(mask, 'q'));
  EXPECT_FALSE(MaskTest(mask, open));
}

// Every string over a small alphabet: accepted exactly when it does not contain the word.
TEST(GbnfText, NotContainingAgreesWithFind) {
  auto vocab = ByteVocab();
  for (const std::string word : {"<tool_call>", "\n</parameter>", "ab", "x", "<é>"}) {
    auto g = CompileGbnf("root ::= " + GbnfNotContaining(word) + "\n", vocab);
    std::string alphabet = word + "q<";
    std::sort(alphabet.begin(), alphabet.end());
    alphabet.erase(std::unique(alphabet.begin(), alphabet.end()), alphabet.end());
    std::mt19937 rng(5);
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      const int len = static_cast<int>(rng() % 24);
      for (int k = 0; k < len; ++k) {
        // Mostly pieces of the word, so that near misses are common.
        if (rng() % 3 == 0) {
          const size_t a = rng() % word.size();
          s += word.substr(a, 1 + rng() % (word.size() - a));
        } else {
          s.push_back(alphabet[rng() % alphabet.size()]);
        }
      }
      if (!Matches(R"(root ::= .*
)",
                   s)) {
        continue;  // a split UTF-8 character: not a string of characters
      }
      Matcher m(g);
      const bool accepted = m.AcceptBytes(s) && m.CanEnd();
      ASSERT_EQ(accepted, s.find(word) == std::string::npos) << word << " in '" << s << "'";
    }
  }
  EXPECT_THROW(GbnfNotContaining("abca"), Error);  // the first character repeats
}

}  // namespace
}  // namespace crossword::grammar
