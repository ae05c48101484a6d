// Python str operations for the Jinja2 interpreter (strip/split/replace/case mapping/format and
// the `str.method` bound methods), working on UTF-8 with code point semantics.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace crossword::chat::jinja {

/// str.strip/lstrip/rstrip: `chars` null (None) strips Unicode whitespace, otherwise the set of
/// code points in `chars`. `left`/`right` select the sides.
std::string PyStrip(std::string_view s, const Value& chars, bool left, bool right);
/// str.split / str.rsplit (sep None: runs of whitespace). Throws for an empty separator.
std::vector<std::string> PySplit(std::string_view s, const Value& sep, int64_t maxsplit,
                                 bool from_right);
/// str.splitlines (Python's line boundaries: \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029).
std::vector<std::string> PySplitLines(std::string_view s, bool keepends);
/// str.replace(old, new, count) (count < 0: all).
std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl,
                      int64_t count);
/// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (Python maps all of
/// Unicode; other scripts pass through unchanged).
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
/// str.capitalize(): first code point upper case, the rest lower case.
std::string PyCapitalize(std::string_view s);
/// str.title(): upper case after every non-letter, lower case elsewhere.
std::string PyTitle(std::string_view s);
/// Whether a code point is a letter for the case-mapped scripts above (plus any code point
/// >= U+0100 of the CJK and other letter blocks treated as uncased letters).
bool PyIsAlpha(char32_t c);
/// printf-style `fmt % args` (Jinja's `format` filter): %s %r %d %i %f %F %e %E %g %G %x %X %o
/// %c %% with flags, width, precision and %(name)s keys when `args` is a dict.
std::string PyPercentFormat(std::string_view fmt, const Value& args);
/// str.format(*positional, **keyword) with {} / {0} / {name} fields and common format specs.
std::string PyStrFormat(std::string_view fmt, const std::vector<Value>& positional,
                        const std::vector<std::pair<std::string, Value>>& keyword);
/// The bound method `s.name` of a string, or Undefined when str has no such method.
Value GetStringMethod(const std::string& s, const std::string& name);
/// Python slice index normalisation for a sequence of `len` items; throws on step 0.
void PySliceIndices(int64_t len, const Value& start, const Value& stop, const Value& step,
                    int64_t* out_start, int64_t* out_stop, int64_t* out_step);

}  // namespace crossword::chat::jinja
