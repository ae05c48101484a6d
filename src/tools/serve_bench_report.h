// Reports of `crossword bench serve` results: SVG line charts (plain SVG 1.1 written here, no
// library) and the side-by-side markdown table of several servers (--compare).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace crossword::tools::servebench {

/// One line of a chart: (x, y) points, drawn in x order.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

/// A line chart: y from 0 up, x linear or log2 (sizes that double: 1, 2, 4, 8 requests; 16K..128K
/// tokens).
struct LineChart {
  std::string title, x_label, y_label;  ///< labels carry their units, e.g. "tokens/s"
  bool log2_x = false;
  std::vector<Series> series;
};

/// A standalone SVG 1.1 document (640 x 400 px): axes with ticks and labels, title, a legend, and
/// one <g class="series" data-name="..."> per series holding its <polyline> and <circle>s. Text is
/// XML-escaped. Series without points are drawn in the legend only.
std::string RenderSvg(const LineChart& chart);

/// The results of one server: config.label (else the file's name) and every result file with that
/// label (several files, e.g. interleaved repeats, are combined by medians).
struct LabeledResults {
  std::string label;
  std::vector<nlohmann::ordered_json> results;
};

/// Groups (file name, result) pairs by label, in the order labels first appear.
std::vector<LabeledResults> GroupByLabel(
    const std::vector<std::pair<std::string, nlohmann::ordered_json>>& files);

/// The charts the results support, as (file name, SVG): conc_throughput.svg (output tokens/s
/// against requests at once, part conc), ctx_decode.svg, ctx_prefill.svg and ctx_ttft.svg
/// (decode tokens/s, prefill tokens/s, median TTFT against prompt tokens, part ctx),
/// mem_rss.svg (peak RSS against context, part mem). One series per label; medians over a label's
/// files. Charts without any point are left out.
std::vector<std::pair<std::string, std::string>> Charts(const std::vector<LabeledResults>& groups);

/// Markdown: the labels with their files' contracts (machine, load, model checksum), a table of
/// the measured steps (output, decode and prefill tokens/s, median TTFT and TPOT, peak RSS; one
/// value per label joined by " / ", and with two labels the first over the second), the memory
/// table (part mem) and the needle table (part needle: passes per label).
std::string CompareMarkdown(const std::vector<LabeledResults>& groups);

}  // namespace crossword::tools::servebench
