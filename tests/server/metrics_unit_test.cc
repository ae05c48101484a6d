// Unit tests of the metrics module (src/server/metrics.h): histogram bucket semantics, what a
// finished request adds, and the exposition text (one HELP and TYPE per family, well-formed
// samples, escaped labels, the vLLM names only with --metrics-compat vllm). The live checks (load,
// promtool, the router's values file) are in tests/server/metrics.mjs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <sstream>

#include "server/metrics.h"

namespace crossword::server {
namespace {

TEST(Histogram, BucketsCountObservationsAtMostTheirBoundCumulatively) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 50.0, 50.0}) h.Observe(v);
  h.Observe(std::nan(""));  // ignored
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 5}));  // a value equal to a bound is in it
  EXPECT_EQ(s.count, 7u);
  EXPECT_DOUBLE_EQ(s.sum, 0.05 + 0.1 + 0.5 + 1.0 + 5.0 + 50.0 + 50.0);
  EXPECT_EQ(h.bound_labels(), (std::vector<std::string>{"0.1", "1", "10"}));
}

TEST(RequestMetrics, AFinishedRequestAddsItsLatenciesOnce) {
  RequestMetrics r;
  engine::RequestOutcome o;
  o.finish = decode::FinishReason::kLength;
  o.output = {1, 2, 3, 4, 5};
  o.queue_seconds = 0.5;
  o.total_seconds = 2.5;
  o.stats.ar_passes = 4;
  o.stats.generated = 5;
  r.OnRequestDone(o, /*first_token_seconds=*/0.5);
  EXPECT_EQ(r.e2e.Read().count, 1u);
  EXPECT_DOUBLE_EQ(r.e2e.Read().sum, 2.5);
  EXPECT_DOUBLE_EQ(r.ttft.Read().sum, 0.5);
  EXPECT_DOUBLE_EQ(r.tpot.Read().sum, 0.5);  // (2.5 - 0.5) / (5 - 1)
  EXPECT_EQ(r.tokens_per_pass.Read().count, 1u);
  EXPECT_EQ(r.finished_length.load(), 1);
  // Cancelled before its first token: e2e and queue only.
  engine::RequestOutcome c;
  c.finish = decode::FinishReason::kCancelled;
  r.OnRequestDone(c, -1);
  EXPECT_EQ(r.e2e.Read().count, 2u);
  EXPECT_EQ(r.ttft.Read().count, 1u);
  EXPECT_EQ(r.tpot.Read().count, 1u);
  EXPECT_EQ(r.finished_stop.load() + r.finished_length.load(), 1);
  // Inter-token latency: every emission but a request's first.
  r.OnEmit(1, true, 0.2);
  r.OnEmit(8, false, 0.03);
  EXPECT_EQ(r.itl.Read().count, 1u);
}

struct Family {
  std::string type;
  int help = 0, types = 0;
  std::vector<std::string> samples;
};

// Parses the exposition text, failing the test on any malformed line.
std::map<std::string, Family> Parse(const std::string& text) {
  std::map<std::string, Family> fams;
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_]\w*="([^"\\]|\\.)*",?)*\})? (-?[0-9.e+-]+|\+Inf))");
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, help)) {
      ++fams[m[1]].help;
    } else if (std::regex_match(line, m, type)) {
      ++fams[m[1]].types;
      fams[m[1]].type = m[2];
    } else if (std::regex_match(line, m, sample)) {
      std::string name = m[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string base = name.substr(0, name.size() - std::strlen(suffix));
        if (name.size() > std::strlen(suffix) && name.ends_with(suffix) && fams.count(base) &&
            fams[base].type == "histogram")
          name = base;
      }
      EXPECT_TRUE(fams.count(name)) << "sample before its TYPE: " << line;
      fams[name].samples.push_back(line);
    } else {
      ADD_FAILURE() << "malformed line: '" << line << "'";
    }
  }
  return fams;
}

MetricsView View() {
  MetricsView v;
  v.ready = true;
  v.n_slots = 4;
  v.cache_block_tokens = 256;
  v.model_name = R"(odd "name"\ here)";
  v.sched.queue_length = 3;
  v.sched.slots_busy = 4;
  v.sched.kv_tokens_total = 4 * 8192;
  v.sched.kv_tokens_used = 8192;
  return v;
}

TEST(RenderMetrics, EveryFamilyHasOneHelpAndTypeAndWellFormedSamples) {
  RequestMetrics r;
  r.ttft.Observe(0.2);
  for (MetricsCompat compat : {MetricsCompat::kNone, MetricsCompat::kVllm}) {
    const std::string text = RenderMetrics(View(), r, compat);
    const auto fams = Parse(text);
    for (const auto& [name, f] : fams) {
      EXPECT_EQ(f.help, 1) << name;
      EXPECT_EQ(f.types, 1) << name;
      EXPECT_FALSE(f.samples.empty()) << name;
      EXPECT_EQ(f.type == "counter", name.ends_with("_total")) << name;  // promtool's rule
    }
    EXPECT_EQ(fams.count("vllm:num_requests_waiting"), compat == MetricsCompat::kVllm ? 1u : 0u);
    EXPECT_EQ(fams.at("crossword_kv_cache_usage_ratio").samples[0],
              "crossword_kv_cache_usage_ratio 0.25");
    EXPECT_EQ(fams.at("crossword_cache_config_info").samples[0],
              R"(crossword_cache_config_info{block_size="256",num_blocks="128"} 1)");
    EXPECT_EQ(fams.at("crossword_time_to_first_token_seconds").samples.back(),
              "crossword_time_to_first_token_seconds_count 1");
    if (compat == MetricsCompat::kVllm) {
      EXPECT_EQ(fams.at("vllm:num_requests_waiting").samples[0],
                R"(vllm:num_requests_waiting{model_name="odd \"name\"\\ here"} 3)");
      EXPECT_EQ(fams.at("vllm:time_to_first_token_seconds").samples.back(),
                R"(vllm:time_to_first_token_seconds_count{model_name="odd \"name\"\\ here"} 1)");
    }
  }
}

TEST(RenderMetrics, TheKvFractionStaysInZeroToOne) {
  RequestMetrics r;
  MetricsView v = View();
  v.sched.kv_tokens_used = 2 * v.sched.kv_tokens_total;  // cannot happen; still clamped
  EXPECT_NE(RenderMetrics(v, r, MetricsCompat::kNone).find("crossword_kv_cache_usage_ratio 1\n"),
            std::string::npos);
  v.ready = false;
  v.sched = {};  // before loading: no pool, no division by zero
  EXPECT_NE(RenderMetrics(v, r, MetricsCompat::kNone).find("crossword_kv_cache_usage_ratio 0\n"),
            std::string::npos);
}

TEST(ParseMetricsCompat, NamesTheFlag) {
  EXPECT_EQ(ParseMetricsCompat("vllm"), MetricsCompat::kVllm);
  EXPECT_EQ(ParseMetricsCompat("none"), MetricsCompat::kNone);
  try {
    ParseMetricsCompat("sglang");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-compat"), std::string::npos);
  }
}

}  // namespace
}  // namespace crossword::server
