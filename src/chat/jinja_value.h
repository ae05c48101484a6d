// Runtime values of the Jinja2 interpreter: Python-like None/bool/int/float/str/list/dict plus
// Jinja's Undefined, namespace objects and callables, with Python's printing, truthiness,
// equality and ordering rules (what Jinja2 inherits from CPython).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace crossword::chat::jinja {

class Value;
class Interpreter;

/// Jinja's Undefined: what a missing variable, key or attribute evaluates to. Printing it gives
/// "", iterating it gives nothing; using it in arithmetic or taking its attributes is an error
/// whose message is `hint` (e.g. "'foo' is undefined").
struct Undefined {
  std::string hint;
};

/// Python's None.
struct None {};

/// A Python list or tuple. Lists are never mutated after construction (the immutable sandbox
/// forbids it), so they are shared by pointer.
struct ListObj {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  ///< container nesting, bounded so that destruction cannot overflow the stack
};

/// Deepest container nesting a value may reach (lists, dicts, namespaces).
inline constexpr int kMaxValueNesting = 512;

/// An insertion-ordered dict with string keys (JSON objects, dict literals, namespaces, loop).
class DictObj {
 public:
  enum class Kind { kDict, kNamespace, kLoop };
  // Members touching entries_ are out of line (jinja_value.cc), where Value is complete: clang
  // instantiates the vector's members in inline ones, before Value is defined.
  explicit DictObj(Kind kind = Kind::kDict);

  Kind kind() const { return kind_; }
  size_t size() const;
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  /// Returns the value stored under `key`, or nullptr.
  const Value* Find(std::string_view key) const;
  /// Inserts or replaces `key` (replacing keeps the original position, like Python). Throws
  /// crossword::Error when the result would nest deeper than kMaxValueNesting.
  void Set(std::string key, Value value);
  int depth() const { return depth_; }
  /// Replaces the value of the i-th entry (insertion order) without a key lookup. Only for
  /// scalars or values whose nesting is already accounted for (the `loop` object).
  void SetAt(size_t i, Value value);
  /// Removes all entries (used to break namespace reference cycles after a render).
  void Clear();

 private:
  Kind kind_;
  int depth_ = 1;
  std::vector<std::pair<std::string, Value>> entries_;
  // Transparent hashing lets Find(string_view) look up without building a std::string.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, size_t, KeyHash, std::equal_to<>> index_;
};

/// Positional and keyword arguments of a call, as evaluated by the interpreter.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

/// A callable: a macro, a global function (range, namespace, raise_exception) or a bound method
/// (`'a,b'.split`). `fn` may throw crossword::Error subclasses.
struct FunctionObj {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

using ListPtr = std::shared_ptr<ListObj>;
using DictPtr = std::shared_ptr<DictObj>;
using FunctionPtr = std::shared_ptr<FunctionObj>;

/// A Jinja value. Copying is cheap for containers (shared) and copies strings.
class Value {
 public:
  using Variant = std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr,
                               DictPtr, FunctionPtr>;

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}       // NOLINT: implicit by design, values are literals.
  Value(None n) : v_(n) {}                       // NOLINT
  Value(bool b) : v_(b) {}                       // NOLINT
  Value(int64_t i) : v_(i) {}                    // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d) : v_(d) {}                     // NOLINT
  Value(std::string s) : v_(std::move(s)) {}     // NOLINT
  Value(const char* s) : v_(std::string(s)) {}   // NOLINT
  Value(ListPtr l) : v_(std::move(l)) {}         // NOLINT
  Value(DictPtr d) : v_(std::move(d)) {}         // NOLINT
  Value(FunctionPtr f) : v_(std::move(f)) {}     // NOLINT

  /// Builds a list (or tuple). Throws crossword::Error past kMaxValueNesting.
  static Value MakeList(std::vector<Value> items, bool is_tuple = false);
  static Value MakeDict(DictObj::Kind kind = DictObj::Kind::kDict);

  bool IsUndefined() const { return std::holds_alternative<Undefined>(v_); }
  bool IsNone() const { return std::holds_alternative<None>(v_); }
  bool IsBool() const { return std::holds_alternative<bool>(v_); }
  bool IsInt() const { return std::holds_alternative<int64_t>(v_); }
  bool IsFloat() const { return std::holds_alternative<double>(v_); }
  /// int, float or bool (Python's numbers; bool is an int subclass).
  bool IsNumber() const { return IsInt() || IsFloat() || IsBool(); }
  bool IsString() const { return std::holds_alternative<std::string>(v_); }
  bool IsList() const { return std::holds_alternative<ListPtr>(v_); }
  bool IsDict() const { return std::holds_alternative<DictPtr>(v_); }
  /// A real mapping (dict), not a namespace or loop object.
  bool IsMapping() const { return IsDict() && dict().kind() == DictObj::Kind::kDict; }
  bool IsFunction() const { return std::holds_alternative<FunctionPtr>(v_); }

  bool AsBool() const { return std::get<bool>(v_); }
  int64_t AsInt() const { return std::get<int64_t>(v_); }
  double AsFloat() const { return std::get<double>(v_); }
  /// Numeric value of an int, float or bool as double.
  double ToDouble() const;
  const std::string& str() const { return std::get<std::string>(v_); }
  const ListObj& list() const { return *std::get<ListPtr>(v_); }
  const ListPtr& list_ptr() const { return std::get<ListPtr>(v_); }
  DictObj& dict() const { return *std::get<DictPtr>(v_); }
  const DictPtr& dict_ptr() const { return std::get<DictPtr>(v_); }
  const FunctionObj& function() const { return *std::get<FunctionPtr>(v_); }
  const Undefined& undefined() const { return std::get<Undefined>(v_); }
  const Variant& variant() const { return v_; }

  /// Python truthiness: None, False, 0, 0.0, "", [], {} and Undefined are false.
  bool Truthy() const;
  /// Container nesting: 0 for scalars.
  int Depth() const;
  /// Python type name for messages ("str", "int", "dict", "NoneType", "Undefined", ...).
  std::string TypeName() const;

 private:
  Variant v_;
};

/// Limits that keep hostile templates and inputs from exhausting the process.
struct RenderLimits {
  int64_t max_steps = 5'000'000;        ///< statements + loop iterations + calls
  size_t max_output_bytes = 64u << 20;  ///< rendered text
  size_t max_string_bytes = 64u << 20;  ///< any single string value
  size_t max_list_items = 4'000'000;    ///< any single list
  int max_call_depth = 64;              ///< nested macro calls
  int max_value_depth = 256;            ///< nesting when printing/serializing values
};

/// str(value) as Python prints it: None -> "None", True -> "True", 2.0 -> "2.0", lists and dicts
/// in repr form, Undefined -> "". Throws crossword::Error past `max_depth` nesting.
std::string ToPyStr(const Value& value, int max_depth = 256);
/// repr(value) as Python prints it ('a' quoted, etc.).
std::string ToPyRepr(const Value& value, int max_depth = 256);
/// Python's float repr: shortest round-trip digits, '1e+16' style exponents, '.0' suffix.
std::string PyFloatRepr(double value);

/// Options of HF's tojson filter (json.dumps keywords).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  int indent = -1;            ///< < 0: no indentation (single line)
  std::string indent_string;  ///< used when indent was given as a string
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
/// json.dumps(value, ...) byte-for-byte as CPython writes it. Throws crossword::Error for values
/// JSON cannot hold (Undefined, functions, namespaces) and past `max_depth` nesting.
std::string PyJsonDumps(const Value& value, const JsonDumpOptions& options, int max_depth = 256);

/// Python ==. Numbers compare by value across int/float/bool; list != tuple; dicts ignore order.
bool PyEquals(const Value& a, const Value& b);
/// Python <: numbers, strings (code point order), lists/tuples lexicographically. Throws
/// crossword::Error ("'<' not supported between ...") for other combinations.
bool PyLess(const Value& a, const Value& b);

/// Converts JSON (the render context) into values. Integers beyond int64 become floats. Throws
/// crossword::Error past kMaxValueNesting.
Value FromJson(const nlohmann::ordered_json& json);

// ---- Unicode helpers (Python str semantics over UTF-8 bytes) ----

/// Decodes UTF-8 into code points; an invalid byte b becomes 0xDC00 + b (like Python's
/// surrogateescape) so that encoding back is lossless.
std::vector<char32_t> DecodeUtf8(std::string_view text);
/// Encodes code points as UTF-8 (0xDC80..0xDCFF map back to the raw bytes).
std::string EncodeUtf8(const std::vector<char32_t>& cps, size_t begin, size_t end);
void AppendUtf8(std::string& out, char32_t cp);
/// str.isspace() for one code point.
bool IsPySpace(char32_t cp);
/// Number of code points (Python len()).
size_t PyLen(std::string_view text);

}  // namespace crossword::chat::jinja
