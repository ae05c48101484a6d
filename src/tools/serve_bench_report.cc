// Charts and the side-by-side table of `crossword bench serve` results (see serve_bench_report.h).
#include "tools/serve_bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "base/markup.h"

namespace crossword::tools::servebench {
namespace {

using json = nlohmann::ordered_json;

constexpr std::array<const char*, 6> kColors = {"#1f77b4", "#d62728", "#2ca02c",
                                                "#ff7f0e", "#9467bd", "#8c564b"};
constexpr double kWidth = 640, kHeight = 400, kLeft = 76, kRight = 160, kTop = 44, kBottom = 58;

// 16384 -> "16K", 130048 -> "127K", 2 -> "2", 0.5 -> "0.5".
std::string TickLabel(double v) {
  if (v >= 1024 && std::fmod(v, 1024) == 0) return fmt::format("{}K", v / 1024);
  if (v >= 10000) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

// A 1, 2 or 5 times a power of ten near `range / 5`.
double NiceStep(double range) {
  const double raw = range / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double n = raw / mag;
  return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * mag;
}

std::string StepKey(const json& s) {
  return fmt::format("{}|{}|{}|{}|{}|{}", s.value("part", "grid"), s.value("input_len", 0),
                     s.value("output_len", 0), s.value("max_concurrency", 0),
                     s.value("request_rate", ""), s.value("depth", -1.0));
}

std::optional<double> Number(const json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

// A figure of a step: a median over its runs (measured steps) or a field of the step itself.
std::optional<double> StepValue(const json& step, const std::string& metric) {
  if (metric == "peak_rss") {
    if (auto v = Number(step, "server_peak_rss_mib")) return v;
    return Number(step, "peak_rss_mib");
  }
  if (metric == "pass") {
    if (step.contains("pass") && step["pass"].is_boolean()) return step["pass"].get<bool>() ? 1 : 0;
    return std::nullopt;
  }
  if (auto v = Number(step.value("median", json::object()), metric.c_str())) return v;
  return Number(step, metric.c_str());
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The steps of every label by key, in the order keys first appear over all labels.
struct Table {
  std::vector<std::string> keys;
  std::map<std::string, json> first;                               // key -> a step (its shape)
  std::vector<std::map<std::string, std::vector<json>>> by_label;  // label -> key -> steps
};

Table Collect(const std::vector<LabeledResults>& groups) {
  Table t;
  for (const LabeledResults& g : groups) {
    auto& mine = t.by_label.emplace_back();
    for (const json& r : g.results) {
      for (const json& s : r.value("steps", json::array())) {
        const std::string key = StepKey(s);
        if (!t.first.count(key)) {
          t.keys.push_back(key);
          t.first[key] = s;
        }
        mine[key].push_back(s);
      }
    }
  }
  return t;
}

// The median over a label's files of one figure of one step (nullopt: none reported it).
std::optional<double> LabelValue(const Table& t, size_t label, const std::string& key,
                                 const std::string& metric) {
  auto it = t.by_label[label].find(key);
  if (it == t.by_label[label].end()) return std::nullopt;
  std::vector<double> v;
  for (const json& s : it->second) {
    if (auto x = StepValue(s, metric)) v.push_back(*x);
  }
  if (v.empty()) return std::nullopt;
  return MedianOf(v);
}

// "a / b (a/b)" with two labels, "a / b / c" with more, "a" with one; "-" where missing.
std::string Cell(const Table& t, const std::string& key, const std::string& metric, int digits) {
  std::string out;
  std::vector<std::optional<double>> v;
  for (size_t l = 0; l < t.by_label.size(); ++l) {
    v.push_back(LabelValue(t, l, key, metric));
    if (l) out += " / ";
    out += v.back() ? fmt::format("{:.{}f}", *v.back(), digits) : "-";
  }
  if (v.size() == 2 && v[0] && v[1] && *v[1] != 0) out += fmt::format(" ({:.2f})", *v[0] / *v[1]);
  return out;
}

// One cell per label from a boolean field over the label's files: "yes" / "no" for one file,
// "k/n" for several, "-" for none; joined by " | " (one table column per label).
std::string BoolCells(const Table& t, const std::string& key, const char* field, const char* yes,
                      const char* no) {
  std::string cells;
  for (size_t l = 0; l < t.by_label.size(); ++l) {
    auto it = t.by_label[l].find(key);
    int k = 0, n = 0;
    if (it != t.by_label[l].end()) {
      for (const json& st : it->second) {
        ++n;
        k += st.value(field, false) ? 1 : 0;
      }
    }
    cells += (l ? " | " : "") + (n == 0   ? std::string("-")
                                 : n == 1 ? std::string(k ? yes : no)
                                          : fmt::format("{}/{} {}", k, n, yes));
  }
  return cells;
}

Series SeriesOf(const Table& t, size_t label, const std::string& name, const std::string& part,
                const char* x_field, const std::string& metric) {
  Series s{name, {}};
  for (const std::string& key : t.keys) {
    const json& shape = t.first.at(key);
    if (shape.value("part", "grid") != part) continue;
    if (part == "mem") {
      // Only sizes that loaded and answered count.
      auto it = t.by_label[label].find(key);
      if (it == t.by_label[label].end()) continue;
      if (!std::any_of(it->second.begin(), it->second.end(),
                       [](const json& st) { return st.value("ok", false); }))
        continue;
    }
    const auto y = LabelValue(t, label, key, metric);
    const auto x = Number(shape, x_field);
    if (x && y) s.points.emplace_back(*x, *y);
  }
  std::sort(s.points.begin(), s.points.end());
  return s;
}

}  // namespace

std::string RenderSvg(const LineChart& chart) {
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  std::vector<double> xs;
  double ymax = 0;
  for (const Series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      xs.push_back(x);
      ymax = std::max(ymax, y);
    }
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  const bool log_x = chart.log2_x && !xs.empty() && xs.front() > 0;
  auto tx = [&](double x) { return log_x ? std::log2(x) : x; };
  double x0 = xs.empty() ? 0 : tx(xs.front()), x1 = xs.empty() ? 1 : tx(xs.back());
  if (x1 - x0 < 1e-12) {
    x0 -= log_x ? 1 : 0.5 * std::max(1.0, std::abs(x0));
    x1 += log_x ? 1 : 0.5 * std::max(1.0, std::abs(x1));
  }
  const double pad = (x1 - x0) * 0.06;
  x0 -= pad;
  x1 += pad;
  if (!(ymax > 0)) ymax = 1;
  const double ystep = NiceStep(ymax);
  const double ytop = std::ceil(ymax * 1.04 / ystep) * ystep;
  auto px = [&](double x) { return kLeft + (tx(x) - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + ph - y / ytop * ph; };

  std::string o = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" "
      "font-weight=\"bold\">{3}</text>\n",
      kWidth, kHeight, kLeft + pw / 2, HtmlEscape(chart.title));
  // Grid and y ticks.
  o += "<g class=\"axes\" stroke=\"#999\" fill=\"none\">\n";
  for (double y = 0; y <= ytop + ystep * 1e-9; y += ystep) {
    o += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/>\n",
        kLeft, py(y), kLeft + pw, py(y));
  }
  o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\"/>\n", kLeft,
                   kTop, kTop + ph);
  o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\"/>\n", kLeft,
                   kTop + ph, kLeft + pw);
  o += "</g>\n<g class=\"ticks\" fill=\"#333\">\n";
  for (double y = 0; y <= ytop + ystep * 1e-9; y += ystep) {
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6,
                     py(y) + 4, HtmlEscape(TickLabel(std::round(y / ystep) * ystep)));
  }
  // x ticks: the data's x values (they are the steps' sizes), at most 12 of them.
  std::vector<double> xt = xs;
  if (xt.size() > 12) {
    std::vector<double> thin;
    for (size_t i = 0; i < xt.size(); i += (xt.size() + 11) / 12) thin.push_back(xt[i]);
    xt = thin;
  }
  for (double x : xt) {
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", px(x),
                     kTop + ph + 18, HtmlEscape(TickLabel(x)));
  }
  o += "</g>\n";
  o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                   kLeft + pw / 2, kHeight - 14, HtmlEscape(chart.x_label));
  o += fmt::format(
      "<text x=\"18\" y=\"{0:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0:.1f})\">"
      "{1}</text>\n",
      kTop + ph / 2, HtmlEscape(chart.y_label));
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    const char* color = kColors[i % kColors.size()];
    std::vector<std::pair<double, double>> pts = s.points;
    std::sort(pts.begin(), pts.end());
    o += fmt::format("<g class=\"series\" data-name=\"{}\" stroke=\"{}\" fill=\"{}\">\n",
                     HtmlEscape(s.name), color, color);
    if (!pts.empty()) {
      std::string line;
      for (const auto& [x, y] : pts) line += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
      line.pop_back();
      o += fmt::format("<polyline fill=\"none\" stroke-width=\"2\" points=\"{}\"/>\n", line);
      for (const auto& [x, y] : pts) {
        o += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\"><title>{}: {} -&gt; "
            "{:.4g}</title></circle>\n",
            px(x), py(y), HtmlEscape(s.name), HtmlEscape(TickLabel(x)), y);
      }
    }
    o += "</g>\n";
    const double ly = kTop + 10 + 20 * static_cast<double>(i);
    o += fmt::format(
        "<g class=\"legend\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"4\" "
        "fill=\"{}\"/><text x=\"{:.1f}\" y=\"{:.1f}\">{}</text></g>\n",
        kLeft + pw + 14, ly - 4, color, kLeft + pw + 34, ly + 1, HtmlEscape(s.name));
  }
  o += "</svg>\n";
  return o;
}

std::vector<LabeledResults> GroupByLabel(const std::vector<std::pair<std::string, json>>& files) {
  std::vector<LabeledResults> out;
  for (const auto& [name, r] : files) {
    std::string label = r.value("config", json::object()).value("label", "");
    if (label.empty()) label = std::filesystem::path(name).stem().string();
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const LabeledResults& g) { return g.label == label; });
    if (it == out.end()) {
      out.push_back({label, {}});
      it = out.end() - 1;
    }
    it->results.push_back(r);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Charts(const std::vector<LabeledResults>& groups) {
  const Table t = Collect(groups);
  struct Spec {
    const char* file;
    const char* part;
    const char* metric;
    const char* title;
    const char* y_label;
    // A second metric on the same chart (series "<label> <name>", the first one "<label> <name1>").
    const char* metric2 = nullptr;
    const char* name1 = nullptr;
    const char* name2 = nullptr;
  };
  const Spec specs[] = {
      {"conc_throughput.svg", "conc", "output_throughput",
       "Output tokens/s against requests at once", "output tokens/s (all requests)"},
      {"ctx_decode.svg", "ctx", "decode_tok_s", "Decode speed against prompt length",
       "decode tokens/s (1000 / median TPOT ms)"},
      {"ctx_prefill.svg", "ctx", "prefill_tok_s", "Prefill speed against prompt length",
       "prefill tokens/s (prompt / TTFT)"},
      {"ctx_ttft.svg", "ctx", "median_ttft_ms", "Time to first token against prompt length",
       "median TTFT (ms)"},
      // The TTFT distribution as requests queue up: its median and its tail (p99) per level.
      {"conc_ttft.svg", "conc", "median_ttft_ms",
       "Time to first token against requests at once (median and p99)", "TTFT (ms)", "p99_ttft_ms",
       "median", "p99"},
      {"mem_rss.svg", "mem", "peak_rss", "Peak server memory against context (fresh server)",
       "peak resident memory (MiB)"},
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (const Spec& sp : specs) {
    LineChart c;
    c.title = sp.title;
    c.y_label = sp.y_label;
    c.log2_x = true;
    c.x_label = std::string(sp.part) == "conc"  ? "requests at once (sent together)"
                : std::string(sp.part) == "mem" ? "prompt tokens (context = prompt + answer)"
                                                : "prompt tokens";
    bool any = false;
    const char* x_field = std::string(sp.part) == "conc" ? "max_concurrency" : "input_len";
    for (size_t l = 0; l < groups.size(); ++l) {
      if (sp.metric2 == nullptr) {
        c.series.push_back(SeriesOf(t, l, groups[l].label, sp.part, x_field, sp.metric));
        any = any || !c.series.back().points.empty();
        continue;
      }
      for (const auto& [metric, name] : {std::pair{sp.metric, sp.name1}, {sp.metric2, sp.name2}}) {
        c.series.push_back(SeriesOf(t, l, groups[l].label + " " + name, sp.part, x_field, metric));
        any = any || !c.series.back().points.empty();
      }
    }
    if (any) out.emplace_back(sp.file, RenderSvg(c));
  }
  return out;
}

std::string CompareMarkdown(const std::vector<LabeledResults>& groups) {
  const Table t = Collect(groups);
  std::string names;
  for (size_t l = 0; l < groups.size(); ++l) names += (l ? " / " : "") + groups[l].label;
  std::string o = fmt::format("# crossword bench serve: {}\n\n", names);
  o += "| server | result files | started (UTC) | machine | load average (start-end) | model "
       "sha256 | known-answer check |\n|---|---:|---|---|---|---|---|\n";
  for (const LabeledResults& g : groups) {
    std::set<std::string> starts, machines, sums;
    double lo = 1e9, hi = -1;
    bool checked = true;
    for (const json& r : g.results) {
      const json c = r.value("contract", json::object());
      starts.insert(c.value("started_utc", "?"));
      const json m = c.value("machine", json::object());
      machines.insert(fmt::format("{} x {}", m.value("cpus", 0), m.value("cpu", std::string("?"))));
      sums.insert(
          c.value("model_file", json::object()).value("sha256", std::string("-")).substr(0, 12));
      for (const char* k : {"loadavg_start", "loadavg_end"}) {
        if (auto v = Number(c, k)) {
          lo = std::min(lo, *v);
          hi = std::max(hi, *v);
        }
      }
      checked = checked && c.value("known_answer_check", false);
    }
    auto join = [](const std::set<std::string>& s) {
      std::string out;
      for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
      return out;
    };
    o += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", g.label, g.results.size(),
                     *starts.begin() + (starts.size() > 1 ? " ..." : ""), join(machines),
                     hi < 0 ? "-" : fmt::format("{:.1f}-{:.1f}", lo, hi), join(sums),
                     checked ? "yes" : "no (--no-known-answer)");
  }
  const bool two = groups.size() == 2;
  const std::string ratio = two ? " (ratio: first / second)" : "";
  o += fmt::format("\nMedians over runs (and over a server's result files); values {}{}.\n", names,
                   ratio);
  std::string speed, mem, needle;
  for (const std::string& key : t.keys) {
    const json& s = t.first.at(key);
    const std::string part = s.value("part", "grid");
    if (part == "mem") {
      mem += fmt::format("| {} | {} | {} | {} | {} |\n", s.value("input_len", 0),
                         s.value("server_ctx", 0), Cell(t, key, "peak_rss", 1),
                         Cell(t, key, "idle_rss_mib", 1), BoolCells(t, key, "ok", "yes", "no"));
    } else if (part == "needle") {
      needle += fmt::format("| {} | {:.2f} | {} |\n", s.value("input_len", 0),
                            s.value("depth", 0.0), BoolCells(t, key, "pass", "pass", "FAIL"));
    } else if (part != "guard") {
      const int conc = s.value("max_concurrency", 0);
      speed += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", part,
                           s.value("input_len", 0), s.value("output_len", 0),
                           conc == 0 ? std::string("all") : std::to_string(conc),
                           Cell(t, key, "output_throughput", 1), Cell(t, key, "decode_tok_s", 1),
                           Cell(t, key, "prefill_tok_s", 1), Cell(t, key, "median_ttft_ms", 1),
                           Cell(t, key, "median_tpot_ms", 2), Cell(t, key, "peak_rss", 0));
    }
  }
  // One column per label: "answered: A | answered: B" / "A | B".
  auto label_cols = [&](const std::string& what) {
    std::string out;
    for (const LabeledResults& g : groups)
      out += " | " + (what.empty() ? g.label : what + ": " + g.label);
    return out;
  };
  std::string label_rule;
  for (size_t l = 0; l < groups.size(); ++l) label_rule += "|---";
  if (!speed.empty()) {
    o +=
        "\n| part | prompt tokens | answer tokens | requests at once | output tok/s | decode tok/s "
        "| prefill tok/s | median TTFT ms | median TPOT ms | server peak RSS MiB |\n"
        "|---|---:|---:|---:|---|---|---|---|---|---|\n" +
        speed;
  }
  if (!mem.empty()) {
    o += "\nMemory on a freshly started server per context size (one request of the prompt size):\n"
         "\n| prompt tokens | server context | peak RSS MiB | idle RSS MiB" +
         label_cols("answered") + " |\n|---:|---:|---|---" + label_rule + "|\n" + mem;
  }
  if (!needle.empty()) {
    o += "\nNeedle (a 5-digit code in the filler at the given depth, asked for last):\n\n"
         "| prompt tokens | needle depth" +
         label_cols("") + " |\n|---:|---:" + label_rule + "|\n" + needle;
  }
  return o;
}

}  // namespace crossword::tools::servebench
