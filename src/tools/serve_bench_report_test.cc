// Tests of `crossword bench serve`'s reports on hand-made results: the SVG charts (escaping,
// series, placement of points), the side-by-side markdown (medians over a server's files,
// ratios, needle cells), and the spawn command's placeholders.
#include "tools/serve_bench_report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "base/error.h"
#include "tools/serve_bench_parts.h"
#include "tools/serve_bench_spawn.h"

namespace crossword::tools::servebench {
namespace {

using json = nlohmann::ordered_json;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A measured step of part `part` whose medians are the given figures.
json Step(const char* part, int input_len, int conc, double out_tps, double ttft_ms) {
  return {{"part", part},
          {"input_len", input_len},
          {"output_len", 4},
          {"max_concurrency", conc},
          {"request_rate", "inf"},
          {"median",
           {{"output_throughput", out_tps},
            {"decode_tok_s", out_tps},
            {"median_ttft_ms", ttft_ms},
            {"p99_ttft_ms", 3 * ttft_ms}}}};
}

json Result(const std::string& label, double scale, bool needle_pass) {
  json steps = json::array();
  for (int c : {1, 2, 4}) steps.push_back(Step("conc", 16, c, 100.0 * c * scale, 10));
  for (int n : {1024, 2048}) steps.push_back(Step("ctx", n, 1, 50 * scale, n / 10.0));
  steps.push_back({{"part", "mem"},
                   {"input_len", 1024},
                   {"output_len", 4},
                   {"server_ctx", 1028},
                   {"ok", true},
                   {"peak_rss_mib", 100 * scale}});
  steps.push_back({{"part", "mem"},
                   {"input_len", 2048},
                   {"output_len", 4},
                   {"server_ctx", 2052},
                   {"ok", false},
                   {"error", "out of memory"}});
  steps.push_back({{"part", "needle"}, {"input_len", 1024}, {"depth", 0.5}, {"pass", needle_pass}});
  return {{"config", {{"label", label}}},
          {"contract", {{"loadavg_start", 1.5}, {"loadavg_end", 2.5}}},
          {"steps", steps}};
}

TEST(ServeBenchReport, SvgHasOneGroupPerSeriesAndEscapesText) {
  LineChart c;
  c.title = "a < b & \"c\"";
  c.x_label = "requests at once";
  c.y_label = "output tokens/s";
  c.log2_x = true;
  c.series = {{"cw", {{1, 10}, {2, 20}, {4, 40}}}, {"llama<1>", {{1, 5}, {4, 30}}}};
  const std::string svg = RenderSvg(c);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(Count(svg, "<g class=\"series\""), 2);
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_EQ(Count(svg, "<circle"), 5);
  EXPECT_NE(svg.find("a &lt; b &amp; &#34;c&#34;"), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"llama&lt;1&gt;\""), std::string::npos);
  EXPECT_EQ(svg.find("llama<1>"), std::string::npos);
  EXPECT_NE(svg.find("output tokens/s"), std::string::npos);
  // x on a log2 axis: 1, 2, 4 equally spaced; y grows upwards (smaller pixel y).
  const size_t at = svg.find("points=\"");
  const std::string pts = svg.substr(at + 8, svg.find('"', at + 8) - at - 8);
  double x1, y1, x2, y2, x3, y3;
  ASSERT_EQ(std::sscanf(pts.c_str(), "%lf,%lf %lf,%lf %lf,%lf", &x1, &y1, &x2, &y2, &x3, &y3), 6);
  EXPECT_NEAR(x2 - x1, x3 - x2, 0.2);
  EXPECT_GT(y1, y2);
  EXPECT_GT(y2, y3);
  // One point or no data still make a valid document.
  c.series = {{"one", {{16384, 3}}}};
  EXPECT_NE(RenderSvg(c).find("16K"), std::string::npos);
  c.series = {{"none", {}}};
  EXPECT_EQ(Count(RenderSvg(c), "<polyline"), 0);
}

TEST(ServeBenchReport, ChartsAndCompareTable) {
  // Server A in one file; B in two files (its medians: the mean of scale 0.4 and 0.6 = 0.5).
  const std::vector<LabeledResults> groups = GroupByLabel({{"a.json", Result("A", 1, true)},
                                                           {"b1.json", Result("B", 0.4, false)},
                                                           {"b2.json", Result("B", 0.6, true)}});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].results.size(), 2u);
  const auto charts = Charts(groups);
  std::vector<std::string> names;
  for (const auto& [name, svg] : charts) {
    names.push_back(name);
    // conc_ttft: a median and a p99 series per server.
    EXPECT_EQ(Count(svg, "<g class=\"series\""), name == "conc_ttft.svg" ? 4 : 2) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"conc_throughput.svg", "ctx_decode.svg",
                                             "ctx_ttft.svg", "conc_ttft.svg", "mem_rss.svg"}));
  EXPECT_NE(charts[3].second.find("data-name=\"B p99\""), std::string::npos);
  // mem: only the size that answered is a point.
  EXPECT_EQ(Count(charts[4].second, "<circle"), 2);

  const std::string md = CompareMarkdown(groups);
  EXPECT_NE(md.find("| conc | 16 | 4 | 4 | 400.0 / 200.0 (2.00) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ctx | 2048 | 4 | 1 | 50.0 / 25.0 (2.00) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1024 | 1028 | 100.0 / 50.0 (2.00) | - / - | yes | 2/2 yes |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 2048 | 2052 | - / - | - / - | no | 0/2 yes |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1024 | 0.50 | pass | 1/2 pass |"), std::string::npos) << md;
  EXPECT_NE(md.find("1.5-2.5"), std::string::npos) << md;

  // A file without a label is named after the file.
  EXPECT_EQ(GroupByLabel({{"dir/run-7.json", json{{"steps", json::array()}}}})[0].label, "run-7");
}

TEST(ServeBenchReport, SpawnPlaceholdersAndNeedleCodes) {
  EXPECT_EQ(ExpandCommand("s --port {port} -c {ctx} --x {port}", 8080, 4100),
            "s --port 8080 -c 4100 --x 8080");
  EXPECT_THROW(ExpandCommand("s -c {ctx}", 1, 2), Error);
  const std::string a = NeedleCode(0, 1024, 0.5);
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(a, NeedleCode(0, 1024, 0.5));
  EXPECT_NE(a, NeedleCode(0, 1024, 0.1));
  EXPECT_NE(a, NeedleCode(1, 1024, 0.5));
}

}  // namespace
}  // namespace crossword::tools::servebench
