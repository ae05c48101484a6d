// Jinja2 tree-walking interpreter: scoping as Jinja2 compiles it (a loop iteration, macro call or
// with block gets a fresh scope; `set` writes the innermost one), statements, expression
// evaluation, macros, and the limits that keep hostile templates bounded.
#include "chat/jinja_interp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/error.h"
#include "chat/template.h"

namespace crossword::chat::jinja {
namespace {

// Binds caller arguments to a macro's parameters, evaluates defaults in the macro's scope and
// renders its body. Held by the FunctionObj a `{% macro %}` creates.
// The closure holds weak references: the defining frame owns the macro, so a strong reference
// would be a cycle that outlives the render.
struct MacroDef {
  const Stmt* stmt;
  std::vector<std::weak_ptr<Frame>> closure;
};

}  // namespace

Interpreter::~Interpreter() {
  // Namespaces are the only mutable containers, hence the only way to build reference cycles
  // (`set ns.self = ns`); emptying them frees everything the render created.
  for (const auto& weak : namespaces_) {
    if (DictPtr ns = weak.lock()) ns->Clear();
  }
}

std::string Interpreter::Run(const Body& body, const Value& context) {
  auto root = std::make_shared<Frame>();
  if (context.IsDict()) {
    for (const auto& [k, v] : context.dict().entries()) root->vars[k] = v;
  }
  chain_ = {root};
  std::string out;
  out_ = &out;
  ExecBody(body);
  out_ = nullptr;
  chain_.clear();
  return out;
}

void Interpreter::Step() {
  if (++steps_ > limits_.max_steps) {
    throw TemplateError(fmt::format(
        "chat template error at line {}: the template exceeded {} steps (runaway loop?)", line_,
        limits_.max_steps));
  }
}

void Interpreter::CheckSize(const Value& v) const {
  if (v.IsString() && v.str().size() > limits_.max_string_bytes) {
    Fail("a string of {} bytes exceeds the template limit of {} bytes", v.str().size(),
         limits_.max_string_bytes);
  }
  if (v.IsList() && v.list().items.size() > limits_.max_list_items) {
    Fail("a list of {} items exceeds the template limit of {} items", v.list().items.size(),
         limits_.max_list_items);
  }
}

void Interpreter::Write(const std::string& text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    Fail("the rendered text exceeds the limit of {} bytes", limits_.max_output_bytes);
  }
  out_->append(text);
}

std::string Interpreter::Capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    ExecBody(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Interpreter::Flow Interpreter::ExecBody(const Body& body) {
  for (const auto& s : body) {
    Flow f = ExecStmt(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecStmt(const Stmt& s) {
  line_ = s.line;
  Step();
  try {
    switch (s.kind) {
      case StmtKind::kOutput:
        Write(s.text);
        break;
      case StmtKind::kPrint: {
        Value v = Eval(*s.expr);
        Write(ToPyStr(v, limits_.max_value_depth));
        break;
      }
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          if (Eval(*s.conditions[i]).Truthy()) return ExecBody(s.bodies[i]);
        }
        return ExecBody(s.else_body);
      case StmtKind::kFor:
        return ExecFor(s);
      case StmtKind::kSet:
        ExecSet(s);
        break;
      case StmtKind::kSetBlock: {
        Value text = Capture(s.body);
        if (s.filter) {
          // The filter chain was parsed with a null operand at its root: substitute the text.
          std::vector<const Expr*> chain;
          for (const Expr* f = s.filter.get(); f; f = f->children[0].get()) chain.push_back(f);
          for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            CallArgs args;
            EvalArgs(**it, 1, &args);
            text = ApplyFilter(*this, (*it)->name, text, args);
          }
        }
        Assign(s.targets, s.target_is_tuple, text);
        break;
      }
      case StmtKind::kFilterBlock: {
        Value text = Capture(s.body);
        std::vector<const Expr*> chain;
        for (const Expr* f = s.filter.get(); f; f = f->children[0].get()) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args;
          EvalArgs(**it, 1, &args);
          text = ApplyFilter(*this, (*it)->name, text, args);
        }
        Write(ToPyStr(text, limits_.max_value_depth));
        break;
      }
      case StmtKind::kMacro:
        DefineMacro(s);
        break;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kWith: {
        auto frame = std::make_shared<Frame>();
        for (size_t i = 0; i < s.targets.size(); ++i)
          frame->vars[s.targets[i]] = Eval(*s.values[i]);
        chain_.push_back(frame);
        Flow f;
        try {
          f = ExecBody(s.body);
        } catch (...) {
          chain_.pop_back();
          throw;
        }
        chain_.pop_back();
        return f;
      }
      case StmtKind::kCallBlock:
        Fail("call blocks are not supported");
    }
  } catch (const TemplateError&) {
    throw;
  } catch (const TemplateException&) {
    throw;
  } catch (const crossword::Error& e) {
    throw TemplateError(fmt::format("chat template error at line {}: {}", line_, e.what()));
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecFor(const Stmt& s) {
  std::vector<Value> items = Iterate(Eval(*s.expr));
  if (s.condition) {
    // The loop filter sees each item bound to the target names, without `loop`.
    std::vector<Value> kept;
    for (Value& item : items) {
      Step();
      chain_.push_back(std::make_shared<Frame>());
      try {
        Assign(s.targets, s.target_is_tuple, item);
        bool keep = Eval(*s.condition).Truthy();
        chain_.pop_back();
        if (keep) kept.push_back(std::move(item));
      } catch (...) {
        chain_.pop_back();
        throw;
      }
    }
    items = std::move(kept);
  }
  if (items.empty()) return ExecBody(s.else_body);
  const int64_t n = static_cast<int64_t>(items.size());
  // One `loop` object and one scope per loop, updated in place each iteration: allocating them
  // per iteration dominated the cost of tight loops. Slots follow the insertion order below.
  enum Slot { kIndex0, kIndex, kRevindex0, kRevindex, kFirst, kLast, kPrev, kNext };
  Value loop = Value::MakeDict(DictObj::Kind::kLoop);
  DictObj& d = loop.dict();
  for (const char* key :
       {"index0", "index", "revindex0", "revindex", "first", "last", "previtem", "nextitem"}) {
    d.Set(key, None{});
  }
  d.Set("length", n);
  d.Set("depth", 1);
  d.Set("depth0", 0);
  auto current = std::make_shared<int64_t>(0);
  auto cycle = std::make_shared<FunctionObj>();
  cycle->name = "loop.cycle";
  cycle->fn = [current](Interpreter&, CallArgs& args) -> Value {
    if (args.positional.empty()) Fail("loop.cycle() needs at least one argument");
    return args.positional[static_cast<size_t>(*current) % args.positional.size()];
  };
  d.Set("cycle", Value(cycle));
  const Value no_prev = Undefined{"there is no previous item"};
  const Value no_next = Undefined{"there is no next item"};
  auto frame = std::make_shared<Frame>();
  chain_.push_back(frame);
  try {
    for (int64_t i = 0; i < n; ++i) {
      line_ = s.line;
      Step();
      *current = i;
      d.SetAt(kIndex0, i);
      d.SetAt(kIndex, i + 1);
      d.SetAt(kRevindex0, n - i - 1);
      d.SetAt(kRevindex, n - i);
      d.SetAt(kFirst, i == 0);
      d.SetAt(kLast, i == n - 1);
      d.SetAt(kPrev, i > 0 ? items[i - 1] : no_prev);
      d.SetAt(kNext, i + 1 < n ? items[i + 1] : no_next);
      frame->vars.clear();  // `set` inside the body does not survive the iteration
      frame->vars.emplace("loop", loop);
      Assign(s.targets, s.target_is_tuple, items[i]);
      if (ExecBody(s.body) == Flow::kBreak) break;
    }
  } catch (...) {
    chain_.pop_back();
    throw;
  }
  chain_.pop_back();
  return Flow::kNormal;
}

void Interpreter::Assign(const std::vector<std::string>& names, bool is_tuple, const Value& v) {
  Frame& frame = *chain_.back();
  if (!is_tuple) {
    frame.vars[names[0]] = v;
    return;
  }
  std::vector<Value> parts = Iterate(v);
  if (parts.size() != names.size()) {
    Fail("cannot unpack {} values into {} names ({})", parts.size(), names.size(),
         fmt::join(names, ", "));
  }
  for (size_t i = 0; i < names.size(); ++i) frame.vars[names[i]] = parts[i];
}

void Interpreter::ExecSet(const Stmt& s) {
  Value v = Eval(*s.expr);
  CheckSize(v);
  if (!s.ns_name.empty()) {
    Value ns = Lookup(s.ns_name);
    if (!ns.IsDict() || ns.dict().kind() != DictObj::Kind::kNamespace) {
      Fail("cannot assign attribute '{}' on '{}': it is not a namespace() object", s.ns_attr,
           s.ns_name);
    }
    ns.dict().Set(s.ns_attr, std::move(v));
    return;
  }
  Assign(s.targets, s.target_is_tuple, v);
}

void Interpreter::DefineMacro(const Stmt& s) {
  auto def = std::make_shared<MacroDef>(MacroDef{&s, {chain_.begin(), chain_.end()}});
  auto fn = std::make_shared<FunctionObj>();
  fn->name = s.name;
  fn->fn = [def](Interpreter& in, CallArgs& args) -> Value {
    const Stmt& m = *def->stmt;
    if (in.call_depth_ >= in.limits_.max_call_depth) {
      Fail("macro '{}' nested deeper than {} calls (runaway recursion?)", m.name,
           in.limits_.max_call_depth);
    }
    if (args.positional.size() > m.targets.size()) {
      Fail("macro '{}' takes not more than {} argument(s), got {}", m.name, m.targets.size(),
           args.positional.size());
    }
    auto frame = std::make_shared<Frame>();
    for (const auto& [k, v] : args.keyword) {
      if (std::find(m.targets.begin(), m.targets.end(), k) == m.targets.end()) {
        Fail("macro '{}' takes no keyword argument '{}'", m.name, k);
      }
    }
    Chain closure;
    for (const auto& weak : def->closure) {
      FramePtr f = weak.lock();
      if (!f) Fail("macro '{}' was called after the scope that defined it ended", m.name);
      closure.push_back(std::move(f));
    }
    closure.push_back(frame);
    Chain saved = std::move(in.chain_);
    in.chain_ = std::move(closure);
    ++in.call_depth_;
    int saved_line = in.line_;
    std::string text;
    try {
      const size_t first_default = m.targets.size() - m.defaults.size();
      for (size_t i = 0; i < m.targets.size(); ++i) {
        const std::string& p = m.targets[i];
        Value v;
        bool found = false;
        if (i < args.positional.size()) {
          v = args.positional[i];
          found = true;
        }
        for (const auto& [k, kv] : args.keyword) {
          if (k != p) continue;
          if (found) Fail("macro '{}' got multiple values for argument '{}'", m.name, p);
          v = kv;
          found = true;
        }
        if (!found) {
          v = i >= first_default
                  ? in.Eval(*m.defaults[i - first_default])
                  : Value(Undefined{fmt::format("parameter '{}' was not provided", p)});
        }
        frame->vars[p] = v;
      }
      text = in.Capture(m.body);
    } catch (...) {
      --in.call_depth_;
      in.chain_ = std::move(saved);
      in.line_ = saved_line;
      throw;
    }
    --in.call_depth_;
    in.chain_ = std::move(saved);
    in.line_ = saved_line;
    return Value(std::move(text));
  };
  chain_.back()->vars[s.name] = Value(fn);
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = chain_.rbegin(); it != chain_.rend(); ++it) {
    auto found = (*it)->vars.find(name);
    if (found != (*it)->vars.end()) return found->second;
  }
  Value g = GetGlobal(name);
  if (!g.IsUndefined()) return g;
  return Undefined{fmt::format("'{}' is undefined", name)};
}

Value Interpreter::Call(const Value& callee, CallArgs& args) {
  if (callee.IsUndefined()) FailUndefined(callee);
  if (!callee.IsFunction()) Fail("'{}' object is not callable", callee.TypeName());
  Step();
  Value result = callee.function().fn(*this, args);
  CheckSize(result);
  return result;
}

void Interpreter::EvalArgs(const Expr& e, size_t first, CallArgs* args) {
  const size_t n_kw = e.keywords.size();
  const size_t n = e.children.size();
  for (size_t i = first; i < n; ++i) {
    Value v = Eval(*e.children[i]);
    if (i + n_kw >= n) {
      args->keyword.emplace_back(e.keywords[i + n_kw - n], std::move(v));
    } else {
      args->positional.push_back(std::move(v));
    }
  }
}

Value Interpreter::EvalCall(const Expr& e) {
  Value callee = Eval(*e.children[0]);
  CallArgs args;
  EvalArgs(e, 1, &args);
  line_ = e.line;
  return Call(callee, args);
}

Value Interpreter::EvalCompare(const Expr& e) {
  Value left = Eval(*e.children[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.children[i + 1]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") {
      ok = PyEquals(left, right);
    } else if (op == "!=") {
      ok = !PyEquals(left, right);
    } else if (op == "in" || op == "notin") {
      ok = Contains(right, left) == (op == "in");
    } else {
      if (left.IsUndefined()) FailUndefined(left);
      if (right.IsUndefined()) FailUndefined(right);
      if (op == "<") {
        ok = PyLess(left, right);
      } else if (op == ">") {
        ok = PyLess(right, left);
      } else if (op == "<=") {
        ok = !PyLess(right, left);
      } else {
        ok = !PyLess(left, right);
      }
    }
    if (!ok) return false;  // chained comparisons short-circuit like Python's
    left = std::move(right);
  }
  return true;
}

Value Interpreter::Eval(const Expr& e) {
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName:
      return Lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) items.push_back(Eval(*c));
      return Value::MakeList(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Value d = Value::MakeDict();
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value k = Eval(*e.children[i]);
        if (!k.IsString()) Fail("dict literal keys must be strings, got {}", k.TypeName());
        d.dict().Set(k.str(), Eval(*e.children[i + 1]));
      }
      return d;
    }
    case ExprKind::kGetAttr:
      return GetAttr(Eval(*e.children[0]), e.name);
    case ExprKind::kGetItem: {
      Value obj = Eval(*e.children[0]);
      const Expr& key = *e.children[1];
      if (key.kind == ExprKind::kSlice) {
        auto part = [&](size_t i) {
          return key.children[i] ? Eval(*key.children[i]) : Value(None{});
        };
        Value start = part(0), stop = part(1), step = part(2);
        if (obj.IsUndefined()) FailUndefined(obj);
        return Slice(obj, start, stop, step);
      }
      return GetItem(obj, Eval(key));
    }
    case ExprKind::kSlice:
      Fail("a slice is only allowed inside [ ]");
    case ExprKind::kCall:
      return EvalCall(e);
    case ExprKind::kFilter: {
      Value v = Eval(*e.children[0]);
      CallArgs args;
      EvalArgs(e, 1, &args);
      line_ = e.line;
      Step();
      Value result = ApplyFilter(*this, e.name, v, args);
      CheckSize(result);
      return result;
    }
    case ExprKind::kTest: {
      Value v = Eval(*e.children[0]);
      CallArgs args;
      EvalArgs(e, 1, &args);
      line_ = e.line;
      return ApplyTest(*this, e.name, v, args);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = Eval(*e.children[0]);
      if (v.IsUndefined()) FailUndefined(v);
      if (e.kind == ExprKind::kPos && v.IsNumber())
        return v.IsBool() ? Value(int64_t{v.AsBool()}) : v;
      if (v.IsFloat()) return -v.AsFloat();
      if (v.IsInt()) {
        if (v.AsInt() == INT64_MIN) Fail("integer overflow");
        return -v.AsInt();
      }
      if (v.IsBool()) return int64_t{v.AsBool() ? -1 : 0};
      Fail("bad operand type for unary {}: '{}'", e.kind == ExprKind::kNeg ? "-" : "+",
           v.TypeName());
    }
    case ExprKind::kNot:
      return !Eval(*e.children[0]).Truthy();
    case ExprKind::kAnd: {
      Value l = Eval(*e.children[0]);
      return l.Truthy() ? Eval(*e.children[1]) : l;
    }
    case ExprKind::kOr: {
      Value l = Eval(*e.children[0]);
      return l.Truthy() ? l : Eval(*e.children[1]);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& c : e.children) {
        s += ToPyStr(Eval(*c), limits_.max_value_depth);
        if (s.size() > limits_.max_string_bytes) {
          Fail("a string of {} bytes exceeds the template limit of {} bytes", s.size(),
               limits_.max_string_bytes);
        }
      }
      return s;
    }
    case ExprKind::kBinary: {
      Value l = Eval(*e.children[0]);
      Value r = Eval(*e.children[1]);
      line_ = e.line;
      // Pre-check repetition sizes so `'x' * 10**12` fails instead of allocating.
      if (e.name == "*" && (l.IsString() || l.IsList() || r.IsString() || r.IsList())) {
        const Value& seq = l.IsString() || l.IsList() ? l : r;
        const Value& count = l.IsString() || l.IsList() ? r : l;
        if (count.IsInt() && count.AsInt() > 0) {
          size_t unit = seq.IsString() ? seq.str().size() : seq.list().items.size();
          size_t limit = seq.IsString() ? limits_.max_string_bytes : limits_.max_list_items;
          if (unit > 0 && static_cast<uint64_t>(count.AsInt()) > limit / unit) {
            Fail("repetition by {} exceeds the template size limit", count.AsInt());
          }
        }
      }
      Value v = BinaryOp(e.name, l, r);
      CheckSize(v);
      return v;
    }
    case ExprKind::kCompare:
      return EvalCompare(e);
    case ExprKind::kCondExpr: {
      if (Eval(*e.children[1]).Truthy()) return Eval(*e.children[0]);
      if (e.children[2]) return Eval(*e.children[2]);
      return Undefined{"the inline if-expression evaluated to false and has no else section"};
    }
  }
  Fail("internal error: unknown expression kind");
}

}  // namespace crossword::chat::jinja
