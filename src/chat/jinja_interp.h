// The Jinja2 tree-walking interpreter (scopes, statements, expressions) and the builtin filters,
// tests, methods and globals it dispatches to. Internal to the chat library.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace crossword::chat::jinja {

/// One variable scope (template top level, a loop iteration, a macro call, a with block).
struct Frame {
  std::unordered_map<std::string, Value> vars;
};
using FramePtr = std::shared_ptr<Frame>;
using Chain = std::vector<FramePtr>;

/// Renders a parsed template. One Interpreter per Render call (not thread-safe itself).
class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  /// Executes `body` with `context` (a dict value) as the top-level variables; returns the text.
  /// Throws TemplateException (raise_exception) or TemplateError (with the template line).
  std::string Run(const Body& body, const Value& context);

  /// Calls a function value (macro, global, bound method). Throws on non-callables.
  Value Call(const Value& callee, CallArgs& args);
  /// Counts one unit of work against RenderLimits::max_steps.
  void Step();
  const RenderLimits& limits() const { return limits_; }
  /// Fails when a string or list would exceed the configured size limits.
  void CheckSize(const Value& v) const;
  /// Records a namespace() object so that it is emptied when the render ends.
  void TrackNamespace(const DictPtr& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow ExecBody(const Body& body);
  Flow ExecStmt(const Stmt& s);
  Flow ExecFor(const Stmt& s);
  void ExecSet(const Stmt& s);
  void DefineMacro(const Stmt& s);
  std::string Capture(const Body& body);
  void Write(const std::string& text);

  Value Eval(const Expr& e);
  Value EvalCall(const Expr& e);
  Value EvalCompare(const Expr& e);
  void EvalArgs(const Expr& e, size_t first, CallArgs* args);
  Value Lookup(const std::string& name) const;
  void Assign(const std::vector<std::string>& names, bool is_tuple, const Value& v);

  RenderLimits limits_;
  Chain chain_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;  // line of the node being evaluated, for error messages
  std::vector<std::weak_ptr<DictObj>> namespaces_;
};

// ---- builtins (jinja_builtins.cc) ----

/// Attribute access `obj.name` with Jinja's sandboxed semantics (dict keys, methods, namespace
/// attributes). Returns Undefined when absent; throws for attribute access on Undefined.
Value GetAttr(const Value& obj, const std::string& name);
/// Subscript `obj[key]` (dict key, list/str index with negatives, falls back to GetAttr).
Value GetItem(const Value& obj, const Value& key);
/// Python slicing obj[start:stop:step] of a list, tuple or string (null parts = defaults).
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
/// Applies filter `name`; throws TemplateError-style crossword::Error for unknown filters.
Value ApplyFilter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
/// Applies test `name` (`x is name(args)`).
bool ApplyTest(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
/// A global function (range, namespace, dict, raise_exception, strftime_now, cycler, joiner)
/// or Undefined.
Value GetGlobal(const std::string& name);
/// Python binary operators + - * / // % ** on values (TypeError-style errors otherwise).
Value BinaryOp(const std::string& op, const Value& a, const Value& b);
/// Python `item in container`.
bool Contains(const Value& container, const Value& item);
/// Items of an iterable for `for` loops and filters: list items, dict keys, string characters,
/// nothing for Undefined. Throws for non-iterables.
std::vector<Value> Iterate(const Value& v);
/// Python hashability (dict keys, set members): lists and dicts are not, tuples if their items are.
bool IsHashable(const Value& v);
/// Fails with the Undefined's message ("'x' is undefined").
[[noreturn]] void FailUndefined(const Value& v);

/// Call arguments mapped onto a builtin's parameter names (Python binding rules).
struct Bound {
  std::vector<Value> values;
  std::vector<bool> given;
  const Value& operator[](size_t i) const { return values[i]; }
  bool has(size_t i) const { return given[i]; }
  Value Or(size_t i, Value def) const { return given[i] ? values[i] : def; }
};
/// Binds `args` to `params`; throws for unknown keywords, duplicates and (unless
/// `extra_positional_ok`) too many positional arguments. `what` names the builtin in errors.
Bound Bind(const std::string& what, CallArgs& args, std::initializer_list<const char*> params,
           bool extra_positional_ok = false);
/// An int (or bool) argument; throws naming `what` otherwise.
int64_t ToInt(const Value& v, const char* what);
/// A dotted attribute path ("a.b.0") resolved as Jinja's make_attrgetter does.
Value GetPath(const Value& item, const Value& path);

}  // namespace crossword::chat::jinja
