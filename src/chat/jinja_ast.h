// Syntax tree of a parsed Jinja2 template (expressions and statements) and the parser entry.
// Node kinds follow Jinja2's own grammar (jinja2/parser.py) so evaluation order matches it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace crossword::chat::jinja {

enum class ExprKind {
  kLiteral,  // value
  kName,     // name
  kList,     // children
  kTuple,    // children
  kDict,     // children = key0, value0, key1, value1, ...
  kGetAttr,  // children[0] . name
  kGetItem,  // children[0] [ children[1] ]
  kSlice,    // children = start, stop, step (each may be null); only as a GetItem key
  kCall,     // children[0] ( children[1..] ), keyword names in `keywords` (aligned to the tail)
  kFilter,   // children[0] | name ( children[1..] ); children[0] null inside filter blocks
  kTest,     // children[0] is name ( children[1..] )
  kNeg,      // - children[0]
  kPos,      // + children[0]
  kNot,      // not children[0]
  kBinary,   // children[0] op children[1]; op in + - * / // % **
  kAnd,
  kOr,
  kConcat,    // children joined with ~
  kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ...
  kCondExpr,  // children = then, test, else (else may be null)
};

/// One expression node. `line`/`column` (1-based) locate it in the template for errors.
struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  Value value;       // kLiteral
  std::string name;  // kName, kGetAttr, kFilter, kTest; op for kBinary
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::string> keywords;  // kCall/kFilter/kTest: names of trailing kwargs
  std::vector<std::string> ops;       // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
};

enum class StmtKind {
  kOutput,    // text
  kPrint,     // expr
  kIf,        // conditions[i] -> bodies[i]; else_body
  kFor,       // targets in expr [if condition]; body; else_body
  kSet,       // targets = expr, or ns_name.attr = expr
  kSetBlock,  // targets = rendered body (| filter)
  kMacro,     // name(params = defaults) body
  kBreak,
  kContinue,
  kFilterBlock,  // body piped through filter
  kWith,         // targets = values; body
  kCallBlock,    // {% call %}: unsupported, kept only to report it
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

/// One statement node.
struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                               // kOutput
  std::unique_ptr<Expr> expr;                     // kPrint, kFor iterable, kSet value
  std::unique_ptr<Expr> condition;                // kFor filter
  std::unique_ptr<Expr> filter;                   // kSetBlock / kFilterBlock filter chain
  std::vector<std::string> targets;               // kFor / kSet / kSetBlock names, kMacro params
  bool target_is_tuple = false;                   // `set a, b = ...` / `for k, v in ...`
  std::string ns_name, ns_attr;                   // kSet on a namespace attribute
  std::string name;                               // kMacro
  std::vector<std::unique_ptr<Expr>> defaults;    // kMacro (aligned to the tail of params)
  std::vector<std::unique_ptr<Expr>> conditions;  // kIf
  std::vector<Body> bodies;                       // kIf branches
  std::vector<std::unique_ptr<Expr>> values;      // kWith
  Body body;
  Body else_body;
};

/// Parses a template (Jinja2 syntax with trim_blocks and lstrip_blocks on, as Hugging Face
/// configures it) into statements. Throws TemplateError naming line and column for syntax
/// errors and for Jinja2 features outside chat-template use (include, extends, recursive loops,
/// call blocks, ...).
Body ParseTemplate(std::string_view source);

}  // namespace crossword::chat::jinja
