// Escaping text for HTML and XML (SVG), shared by the template engine's `escape` filter and the
// benchmark charts.
#pragma once

#include <string>
#include <string_view>

namespace crossword {

/// `s` with & < > " ' replaced by &amp; &lt; &gt; &#34; &#39;: MarkupSafe's escape() (what
/// Jinja's `escape` filter prints), which is also valid in XML text and attribute values.
inline std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace crossword
