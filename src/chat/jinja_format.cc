// Python string formatting for the Jinja2 interpreter: printf-style `%` (the `format` filter and
// the `%` operator) and str.format with format specs.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace crossword::chat::jinja {

// ---------------------------------------------------------------------------------------------
// %-formatting.

std::string PyPercentFormat(std::string_view fmt, const Value& args) {
  std::vector<Value> positional;
  const DictObj* mapping = nullptr;
  // CPython skips the "not all arguments converted" check for mapping-like right operands (any
  // non-tuple, non-str object with __getitem__: lists and dicts).
  bool lenient = (args.IsList() && !args.list().is_tuple) || args.IsMapping();
  if (args.IsList() && args.list().is_tuple) {
    positional = args.list().items;
  } else if (args.IsMapping()) {
    mapping = &args.dict();
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) Fail("format: incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string_view::npos || !mapping) Fail("format: bad %(key) specifier");
      arg = mapping->Find(fmt.substr(i + 1, close - i - 1));
      if (!arg) Fail("format: missing key '{}'", fmt.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) {
      flags.push_back(fmt[i++]);
    }
    std::string width, precision;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
      width.push_back(fmt[i++]);
    bool has_precision = false;
    if (i < fmt.size() && fmt[i] == '.') {
      has_precision = true;
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
        precision.push_back(fmt[i++]);
    }
    if (i >= fmt.size()) Fail("format: incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next >= positional.size()) Fail("format: not enough arguments for format string");
      arg = &positional[next++];
    }
    if (width.size() > 4 || precision.size() > 3) Fail("format: width/precision too large");
    std::string spec = "%" + flags + width + (has_precision ? "." + precision : "");
    char buf[512];
    if (conv == 's' || conv == 'r' || conv == 'a') {
      std::string text = conv == 's' ? ToPyStr(*arg) : ToPyRepr(*arg);
      auto cps = DecodeUtf8(text);
      if (has_precision) cps.resize(std::min<size_t>(cps.size(), std::stoul("0" + precision)));
      std::string body = EncodeUtf8(cps, 0, cps.size());
      size_t w = width.empty() ? 0 : std::stoul(width);
      std::string pad(w > cps.size() ? w - cps.size() : 0, ' ');
      out += flags.find('-') != std::string::npos ? body + pad : pad + body;
    } else if (std::string_view("diuxXoc").find(conv) != std::string_view::npos) {
      if (!arg->IsNumber()) Fail("format: %{} requires a number, not {}", conv, arg->TypeName());
      if (conv != 'd' && conv != 'i' && conv != 'u' && conv != 'c' && arg->IsFloat()) {
        Fail("format: %{} requires an integer, not float", conv);
      }
      long long v = arg->IsFloat()  ? static_cast<long long>(std::trunc(arg->AsFloat()))
                    : arg->IsBool() ? arg->AsBool()
                                    : arg->AsInt();
      if (conv == 'c') {
        std::string ch;
        AppendUtf8(ch, static_cast<char32_t>(v));
        out += ch;
        continue;
      }
      char c = conv == 'i' || conv == 'u' ? 'd' : conv;
      std::snprintf(buf, sizeof(buf), (spec + "ll" + c).c_str(), v);
      out += buf;
    } else if (std::string_view("fFeEgG").find(conv) != std::string_view::npos) {
      if (!arg->IsNumber()) Fail("format: %{} requires a number, not {}", conv, arg->TypeName());
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), arg->ToDouble());
      out += buf;
    } else {
      Fail("format: unsupported format character '{}'", conv);
    }
  }
  if (!mapping && !lenient && next < positional.size()) {
    Fail("format: not all arguments converted during string formatting");
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// str.format.

namespace {

std::string ApplyFormatSpec(const Value& v, std::string_view spec) {
  // [[fill]align][sign][#][0][width][,][.precision][type]
  size_t i = 0;
  char32_t fill = ' ';
  char align = 0;
  auto cps = DecodeUtf8(spec);
  std::string rest = EncodeUtf8(cps, 0, cps.size());
  if (cps.size() >= 2 &&
      std::string_view("<>^=").find(static_cast<char>(cps[1] < 0x80 ? cps[1] : 0)) !=
          std::string_view::npos &&
      cps[1] < 0x80) {
    fill = cps[0];
    align = static_cast<char>(cps[1]);
    rest = EncodeUtf8(cps, 2, cps.size());
  } else if (!cps.empty() && cps[0] < 0x80 &&
             std::string_view("<>^=").find(static_cast<char>(cps[0])) != std::string_view::npos) {
    align = static_cast<char>(cps[0]);
    rest = EncodeUtf8(cps, 1, cps.size());
  }
  std::string_view r = rest;
  std::string sign;
  if (i < r.size() && (r[i] == '+' || r[i] == '-' || r[i] == ' ')) sign = r[i++];
  bool alt = i < r.size() && r[i] == '#' ? (++i, true) : false;
  if (i < r.size() && r[i] == '0') {
    if (!align) {
      fill = '0';
      align = '=';
    }
    ++i;
  }
  size_t width = 0;
  while (i < r.size() && std::isdigit(static_cast<unsigned char>(r[i]))) {
    width = width * 10 + (r[i++] - '0');
    if (width > 10000) Fail("format spec width too large");
  }
  bool comma = i < r.size() && r[i] == ',' ? (++i, true) : false;
  int precision = -1;
  if (i < r.size() && r[i] == '.') {
    ++i;
    precision = 0;
    while (i < r.size() && std::isdigit(static_cast<unsigned char>(r[i]))) {
      precision = precision * 10 + (r[i++] - '0');
      if (precision > 300) Fail("format spec precision too large");
    }
  }
  char type = i < r.size() ? r[i++] : 0;
  if (i != r.size()) Fail("invalid format specifier '{}'", spec);
  std::string body;
  bool numeric = false;
  char buf[512];
  if (v.IsString() || (!v.IsNumber() && type == 0) || type == 's') {
    if (!v.IsString() && type == 's') Fail("format code 's' needs a string");
    auto text = DecodeUtf8(v.IsString() ? v.str() : ToPyStr(v));
    if (precision >= 0 && static_cast<size_t>(precision) < text.size()) text.resize(precision);
    body = EncodeUtf8(text, 0, text.size());
    if (!align) align = '<';
  } else {
    numeric = true;
    if (!align) align = '>';
    bool integral = (v.IsInt() || v.IsBool()) &&
                    (type == 0 || std::string_view("dxXob").find(type) != std::string_view::npos);
    std::string flags = sign == "-" ? "" : sign;
    if (alt) flags += "#";
    if (integral) {
      long long x = v.IsBool() ? v.AsBool() : v.AsInt();
      char t = type == 0 || type == 'b' ? 'd' : type;
      if (type == 'b') {
        std::string bits;
        unsigned long long u = x < 0 ? -static_cast<unsigned long long>(x) : x;
        do {
          bits.insert(bits.begin(), static_cast<char>('0' + (u & 1)));
          u >>= 1;
        } while (u);
        body = (x < 0                                  ? "-"
                : flags.find('+') != std::string::npos ? "+"
                                                       : "") +
               std::string(alt ? "0b" : "") + bits;
      } else {
        std::snprintf(buf, sizeof(buf), ("%" + flags + "ll" + t).c_str(), x);
        body = buf;
      }
    } else {
      if (!v.IsNumber()) Fail("format code '{}' needs a number, got {}", type, v.TypeName());
      double d = v.ToDouble();
      char t = type == 0 ? 'g' : type == '%' ? 'f' : type;
      if (type == '%') d *= 100;
      if (type == 0 && precision < 0) {
        body = PyFloatRepr(d);
        if (sign == "+" && d >= 0) body = "+" + body;
      } else {
        std::snprintf(
            buf, sizeof(buf),
            ("%" + flags + "." + std::to_string(precision < 0 ? 6 : precision) + t).c_str(), d);
        body = buf;
      }
      if (type == '%') body += "%";
    }
    if (comma) {
      size_t start = body.find_first_of("0123456789");
      size_t end = body.find_first_not_of("0123456789", start);
      if (end == std::string::npos) end = body.size();
      for (size_t p = end; p > start + 3; p -= 3) body.insert(p - 3, ",");
    }
  }
  size_t len = PyLen(body);
  if (width <= len) return body;
  std::string pad_unit;
  AppendUtf8(pad_unit, fill);
  size_t pad = width - len;
  auto repeat = [&](size_t n) {
    std::string s;
    for (size_t k = 0; k < n; ++k) s += pad_unit;
    return s;
  };
  switch (align) {
    case '<':
      return body + repeat(pad);
    case '^':
      return repeat(pad / 2) + body + repeat(pad - pad / 2);
    case '=':
      if (numeric && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
        return body.substr(0, 1) + repeat(pad) + body.substr(1);
      }
      return repeat(pad) + body;
    default:
      return repeat(pad) + body;
  }
}

}  // namespace

std::string PyStrFormat(std::string_view fmt, const std::vector<Value>& positional,
                        const std::vector<std::pair<std::string, Value>>& keyword) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      Fail("str.format: single '}}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) Fail("str.format: expected '}}' before end of string");
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    size_t colon = field.find(':');
    if (colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    size_t bang = field.find('!');
    if (bang != std::string_view::npos) {
      if (bang + 2 != field.size()) Fail("str.format: bad conversion in '{}'", field);
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    size_t name_end = field.find_first_of(".[");
    std::string_view name = field.substr(0, name_end);
    Value v;
    if (name.empty()) {
      if (auto_index >= positional.size())
        Fail("str.format: replacement index {} out of range", auto_index);
      v = positional[auto_index++];
    } else if (std::all_of(name.begin(), name.end(),
                           [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      size_t idx = std::stoul(std::string(name));
      if (idx >= positional.size()) Fail("str.format: replacement index {} out of range", idx);
      v = positional[idx];
    } else {
      auto it = std::find_if(keyword.begin(), keyword.end(),
                             [&](const auto& kv) { return kv.first == name; });
      if (it == keyword.end()) Fail("str.format: missing keyword argument '{}'", name);
      v = it->second;
    }
    std::string_view rest =
        name_end == std::string_view::npos ? std::string_view() : field.substr(name_end);
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t end = rest.find_first_of(".[", 1);
        v = GetAttr(v, std::string(rest.substr(
                           1, end == std::string_view::npos ? std::string_view::npos : end - 1)));
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
      } else {
        size_t end = rest.find(']');
        if (end == std::string_view::npos) Fail("str.format: missing ']' in '{}'", field);
        std::string key(rest.substr(1, end - 1));
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        });
        v = digits ? GetItem(v, Value(static_cast<int64_t>(std::stoll(key))))
                   : GetItem(v, Value(key));
        rest = rest.substr(end + 1);
      }
    }
    if (conversion == 'r') {
      v = ToPyRepr(v);
    } else if (conversion == 's') {
      v = ToPyStr(v);
    } else if (conversion) {
      Fail("str.format: unknown conversion '!{}'", conversion);
    }
    out += spec.empty() ? ToPyStr(v) : ApplyFormatSpec(v, spec);
  }
  return out;
}

}  // namespace crossword::chat::jinja
