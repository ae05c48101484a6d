// Jinja2 builtins as chat templates use them: attribute/item access, Python operators, the
// filters and tests of jinja2/filters.py and jinja2/tests.py, HF's tojson, and the globals
// (range, namespace, dict, raise_exception, strftime_now, joiner).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <initializer_list>

#include "base/error.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"
#include "chat/template.h"

namespace crossword::chat::jinja {
namespace {

// Sandbox limit on range() (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

std::string Str(const Value& v) { return ToPyStr(v); }

}  // namespace

Bound Bind(const std::string& what, CallArgs& args, std::initializer_list<const char*> params,
           bool extra_positional_ok) {
  Bound b;
  b.values.resize(params.size());
  b.given.resize(params.size(), false);
  size_t n = std::min(args.positional.size(), params.size());
  if (args.positional.size() > params.size() && !extra_positional_ok) {
    Fail("{} takes at most {} argument(s), got {}", what, params.size(), args.positional.size());
  }
  for (size_t i = 0; i < n; ++i) {
    b.values[i] = args.positional[i];
    b.given[i] = true;
  }
  for (const auto& kw : args.keyword) {
    const auto& k = kw.first;  // not a structured binding: clang 14 cannot capture those
    const auto& v = kw.second;
    auto it = std::find_if(params.begin(), params.end(), [&](const char* p) { return k == p; });
    if (it == params.end()) Fail("{} got an unexpected keyword argument '{}'", what, k);
    size_t idx = static_cast<size_t>(it - params.begin());
    if (b.given[idx]) Fail("{} got multiple values for argument '{}'", what, k);
    b.values[idx] = v;
    b.given[idx] = true;
  }
  return b;
}

int64_t ToInt(const Value& v, const char* what) {
  if (v.IsInt()) return v.AsInt();
  if (v.IsBool()) return v.AsBool();
  Fail("{} must be an integer, got {}", what, v.TypeName());
}

// A dotted attribute path ("a.b.0") as Jinja's make_attrgetter resolves it.
Value GetPath(const Value& item, const Value& path) {
  if (path.IsInt()) return GetItem(item, path);
  Value cur = item;
  for (const std::string& part : PySplit(Str(path), Value("."), -1, false)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? GetItem(cur, Value(static_cast<int64_t>(std::stoll(part))))
                 : GetItem(cur, Value(part));
  }
  return cur;
}

bool IsHashable(const Value& v) {
  if (v.IsMapping()) return false;
  if (!v.IsList()) return true;
  if (!v.list().is_tuple) return false;
  return std::all_of(v.list().items.begin(), v.list().items.end(), IsHashable);
}

[[noreturn]] void FailUndefined(const Value& v) {
  Fail("{}", v.IsUndefined() ? v.undefined().hint : std::string("undefined value"));
}

std::vector<Value> Iterate(const Value& v) {
  if (v.IsList()) return v.list().items;
  if (v.IsUndefined()) return {};
  if (v.IsMapping()) {
    std::vector<Value> keys;
    for (const auto& [k, val] : v.dict().entries()) keys.emplace_back(k);
    return keys;
  }
  if (v.IsString()) {
    std::vector<Value> chars;
    for (char32_t c : DecodeUtf8(v.str())) {
      std::string s;
      AppendUtf8(s, c);
      chars.emplace_back(std::move(s));
    }
    return chars;
  }
  Fail("'{}' object is not iterable", v.TypeName());
}

bool Contains(const Value& c, const Value& item) {
  if (c.IsString()) {
    if (!item.IsString())
      Fail("'in <string>' requires string as left operand, not {}", item.TypeName());
    return c.str().find(item.str()) != std::string::npos;
  }
  if (c.IsList()) {
    return std::any_of(c.list().items.begin(), c.list().items.end(),
                       [&](const Value& x) { return PyEquals(x, item); });
  }
  if (c.IsMapping()) {
    if (!IsHashable(item)) Fail("unhashable type: '{}'", item.TypeName());
    return item.IsString() && c.dict().Find(item.str()) != nullptr;
  }
  if (c.IsUndefined()) return false;
  Fail("argument of type '{}' is not iterable", c.TypeName());
}

Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.IsUndefined()) FailUndefined(obj);
  if (obj.IsDict()) {
    const DictObj& d = obj.dict();
    if (d.kind() == DictObj::Kind::kDict &&
        (name == "items" || name == "keys" || name == "values" || name == "get")) {
      auto f = std::make_shared<FunctionObj>();
      f->name = "dict." + name;
      f->fn = [self = obj, name](Interpreter&, CallArgs& args) -> Value {
        if (name == "get") {
          Bound b = Bind("dict.get", args, {"key", "default"});
          const Value* found = b[0].IsString() ? self.dict().Find(b[0].str()) : nullptr;
          return found ? *found : b.Or(1, None{});
        }
        if (!args.positional.empty() || !args.keyword.empty())
          Fail("dict.{}() takes no arguments", name);
        std::vector<Value> out;
        for (const auto& [k, v] : self.dict().entries()) {
          if (name == "items") {
            out.push_back(Value::MakeList({Value(k), v}, true));
          } else {
            out.push_back(name == "keys" ? Value(k) : v);
          }
        }
        return Value::MakeList(std::move(out));
      };
      return Value(f);
    }
    if (const Value* v = d.Find(name)) return *v;
    return Undefined{fmt::format("'{}' object has no attribute '{}'", obj.TypeName(), name)};
  }
  if (obj.IsString()) return GetStringMethod(obj.str(), name);
  if (obj.IsList() && (name == "index" || name == "count")) {
    auto f = std::make_shared<FunctionObj>();
    f->name = "list." + name;
    f->fn = [self = obj, name](Interpreter&, CallArgs& args) -> Value {
      if (args.positional.size() != 1) Fail("list.{}() takes exactly one argument", name);
      const auto& items = self.list().items;
      int64_t count = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!PyEquals(items[i], args.positional[0])) continue;
        if (name == "index") return static_cast<int64_t>(i);
        ++count;
      }
      if (name == "index") Fail("list.index(x): x not in list");
      return count;
    };
    return Value(f);
  }
  return Undefined{fmt::format("'{}' object has no attribute '{}'", obj.TypeName(), name)};
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.IsUndefined()) FailUndefined(obj);
  if (obj.IsDict() && obj.dict().kind() == DictObj::Kind::kDict) {
    if (key.IsString()) {
      if (const Value* v = obj.dict().Find(key.str())) return *v;
      return GetAttr(obj, key.str());
    }
    return Undefined{fmt::format("'dict object' has no attribute {}", ToPyRepr(key))};
  }
  if ((obj.IsList() || obj.IsString()) && (key.IsInt() || key.IsBool())) {
    int64_t i = key.IsBool() ? key.AsBool() : key.AsInt();
    if (obj.IsList()) {
      const auto& items = obj.list().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n)
        return Undefined{fmt::format("'{} object' has no element {}", obj.TypeName(),
                                     key.IsInt() ? key.AsInt() : i)};
      return items[static_cast<size_t>(i)];
    }
    auto cps = DecodeUtf8(obj.str());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n)
      return Undefined{fmt::format("'str object' has no element {}", key.AsInt())};
    return EncodeUtf8(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1);
  }
  if (key.IsString()) return GetAttr(obj, key.str());
  return Undefined{fmt::format("'{}' object has no element {}", obj.TypeName(), ToPyRepr(key))};
}

Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  int64_t b, e, st;
  if (obj.IsList()) {
    const auto& items = obj.list().items;
    PySliceIndices(static_cast<int64_t>(items.size()), start, stop, step, &b, &e, &st);
    std::vector<Value> out;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st)
      out.push_back(items[static_cast<size_t>(i)]);
    return Value::MakeList(std::move(out), obj.list().is_tuple);
  }
  if (obj.IsString()) {
    auto cps = DecodeUtf8(obj.str());
    PySliceIndices(static_cast<int64_t>(cps.size()), start, stop, step, &b, &e, &st);
    std::string out;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st)
      AppendUtf8(out, cps[static_cast<size_t>(i)]);
    return out;
  }
  return Undefined{fmt::format("'{}' object cannot be sliced", obj.TypeName())};
}

Value BinaryOp(const std::string& op, const Value& a, const Value& b) {
  // str % Undefined runs str.__mod__ first: Undefined is mapping-like, so a format without
  // directives succeeds.
  if (op == "%" && a.IsString() && b.IsUndefined() && a.str().find('%') == std::string::npos) {
    return a;
  }
  if (a.IsUndefined()) FailUndefined(a);
  if (b.IsUndefined()) FailUndefined(b);
  auto type_error = [&]() -> Value {
    Fail("unsupported operand type(s) for {}: '{}' and '{}'", op, a.TypeName(), b.TypeName());
  };
  if (a.IsNumber() && b.IsNumber()) {
    bool ints = !a.IsFloat() && !b.IsFloat();
    int64_t x = ints ? (a.IsBool() ? a.AsBool() : a.AsInt()) : 0;
    int64_t y = ints ? (b.IsBool() ? b.AsBool() : b.AsInt()) : 0;
    double dx = a.ToDouble(), dy = b.ToDouble();
    int64_t r;
    if (op == "+") {
      if (!ints) return dx + dy;
      if (__builtin_add_overflow(x, y, &r)) Fail("integer overflow in +");
      return r;
    }
    if (op == "-") {
      if (!ints) return dx - dy;
      if (__builtin_sub_overflow(x, y, &r)) Fail("integer overflow in -");
      return r;
    }
    if (op == "*") {
      if (!ints) return dx * dy;
      if (__builtin_mul_overflow(x, y, &r)) Fail("integer overflow in *");
      return r;
    }
    if (op == "/") {
      if (dy == 0) Fail("division by zero");
      return dx / dy;
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (y == 0) Fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) Fail("integer overflow in {}", op);
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return op == "//" ? Value(q) : Value(m);
      }
      if (dy == 0) Fail("float division by zero");
      double m = std::fmod(dx, dy);
      if (m != 0 && ((m < 0) != (dy < 0))) m += dy;
      if (m == 0) m = std::copysign(0.0, dy);  // CPython: a zero remainder takes the divisor's sign
      if (op == "%") return m;
      // CPython's float floor division: exact quotient of (x - x mod y), rounded to nearest.
      double div = (dx - m) / dy;
      double floor_div = std::floor(div);
      if (div - floor_div > 0.5) floor_div += 1.0;
      return floor_div;
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result))
            Fail("integer overflow in **");
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) Fail("integer overflow in **");
        }
        return result;
      }
      return std::pow(dx, dy);
    }
    return type_error();
  }
  if (op == "+") {
    if (a.IsString() && b.IsString()) return a.str() + b.str();
    if (a.IsList() && b.IsList() && a.list().is_tuple == b.list().is_tuple) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::MakeList(std::move(items), a.list().is_tuple);
    }
    if (a.IsString()) Fail("can only concatenate str (not \"{}\") to str", b.TypeName());
    if (a.IsList())
      Fail("can only concatenate {} (not \"{}\") to {}", a.TypeName(), b.TypeName(), a.TypeName());
    return type_error();
  }
  if (op == "*" && (a.IsString() || a.IsList() || b.IsString() || b.IsList())) {
    const Value& seq = a.IsString() || a.IsList() ? a : b;
    const Value& n = a.IsString() || a.IsList() ? b : a;
    if (!n.IsInt() && !n.IsBool())
      Fail("can't multiply sequence by non-int of type '{}'", n.TypeName());
    int64_t count = std::max<int64_t>(0, n.IsBool() ? n.AsBool() : n.AsInt());
    if (seq.IsString()) {
      std::string out;
      out.reserve(seq.str().size() * static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) out += seq.str();
      return out;
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < count; ++i)
      items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
    return Value::MakeList(std::move(items), seq.list().is_tuple);
  }
  if (op == "%" && a.IsString()) return PyPercentFormat(a.str(), b);
  return type_error();
}

Value GetGlobal(const std::string& name) {
  auto make = [&](std::function<Value(Interpreter&, CallArgs&)> fn) {
    auto f = std::make_shared<FunctionObj>();
    f->name = name;
    f->fn = std::move(fn);
    return Value(f);
  };
  if (name == "raise_exception") {
    return make([](Interpreter&, CallArgs& args) -> Value {
      std::string message = args.positional.empty() ? "" : Str(args.positional[0]);
      throw TemplateException(message);
    });
  }
  if (name == "range") {
    return make([](Interpreter&, CallArgs& args) -> Value {
      if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
        Fail("range() takes 1 to 3 positional arguments");
      }
      int64_t start = 0, stop, step = 1;
      if (args.positional.size() == 1) {
        stop = ToInt(args.positional[0], "range() argument");
      } else {
        start = ToInt(args.positional[0], "range() argument");
        stop = ToInt(args.positional[1], "range() argument");
        if (args.positional.size() == 3) step = ToInt(args.positional[2], "range() step");
      }
      if (step == 0) Fail("range() arg 3 must not be zero");
      long double n = step > 0 ? (static_cast<long double>(stop) - start + step - 1) / step
                               : (static_cast<long double>(start) - stop - step - 1) / -step;
      if (n > kMaxRange) Fail("range too big, maximum size for range is {}", kMaxRange);
      std::vector<Value> items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.emplace_back(i);
      return Value::MakeList(std::move(items));
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return make([ns](Interpreter& in, CallArgs& args) -> Value {
      Value d = Value::MakeDict(ns ? DictObj::Kind::kNamespace : DictObj::Kind::kDict);
      for (const Value& p : args.positional) {
        if (!p.IsMapping())
          Fail("{}() positional arguments must be dicts", ns ? "namespace" : "dict");
        for (const auto& [k, v] : p.dict().entries()) d.dict().Set(k, v);
      }
      for (const auto& [k, v] : args.keyword) d.dict().Set(k, v);
      if (ns) in.TrackNamespace(d.dict_ptr());
      return d;
    });
  }
  if (name == "strftime_now") {
    return make([](Interpreter&, CallArgs& args) -> Value {
      if (args.positional.size() != 1 || !args.positional[0].IsString()) {
        Fail("strftime_now(format) takes one string argument");
      }
      std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[256];
      size_t n = std::strftime(buf, sizeof(buf), args.positional[0].str().c_str(), &local);
      return std::string(buf, n);
    });
  }
  if (name == "joiner") {
    return make([](Interpreter&, CallArgs& args) -> Value {
      Bound b = Bind("joiner", args, {"sep"});
      std::string sep = b.has(0) ? Str(b[0]) : ", ";
      auto used = std::make_shared<bool>(false);
      auto f = std::make_shared<FunctionObj>();
      f->name = "joiner";
      f->fn = [sep, used](Interpreter&, CallArgs&) -> Value {
        if (!*used) {
          *used = true;
          return std::string();
        }
        return sep;
      };
      return Value(f);
    });
  }
  return Undefined{};
}

}  // namespace crossword::chat::jinja
