// The metrics math of `crossword bench serve` (see serve_bench.h): percentiles, summaries, the
// per-run metrics as vLLM's calculate_metrics defines them, arrivals, and the stream parser.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "base/error.h"
#include "tools/serve_bench.h"

namespace crossword::tools::servebench {

using json = nlohmann::ordered_json;

Slo ParseSlo(const std::string& text) {
  Slo slo;
  std::string spec = text;
  std::replace(spec.begin(), spec.end(), ',', ' ');
  std::istringstream in(spec);
  std::string item;
  while (in >> item) {
    const size_t colon = item.find(':');
    Check(colon != std::string::npos && colon > 0 && colon + 1 < item.size(),
          "--goodput: '{}' is not NAME:MS (names ttft, tpot, e2el)", item);
    const std::string name = item.substr(0, colon), value = item.substr(colon + 1);
    double ms = 0;
    try {
      size_t used = 0;
      ms = std::stod(value, &used);
      Check(used == value.size(), "");
    } catch (const std::exception&) {
      Fail("--goodput: '{}' is not a number of milliseconds", value);
    }
    Check(ms >= 0 && std::isfinite(ms), "--goodput: {} must be >= 0 ms (got {})", name, value);
    if (name == "ttft") {
      slo.ttft_ms = ms;
    } else if (name == "tpot") {
      slo.tpot_ms = ms;
    } else if (name == "e2el") {
      slo.e2el_ms = ms;
    } else {
      Fail("--goodput: unknown metric '{}' (ttft, tpot or e2el)", name);
    }
  }
  return slo;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Distribution Summarize(std::vector<double> values, const std::vector<double>& percentiles) {
  Distribution d;
  d.n = static_cast<int64_t>(values.size());
  if (values.empty()) {
    for (double p : percentiles) d.percentiles[p] = 0;
    return d;
  }
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double var = 0;
  for (double v : values) var += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(var / n);  // population std, as numpy.std
  d.median = Percentile(values, 50);
  d.min = values.front();
  d.max = values.back();
  for (double p : percentiles) d.percentiles[p] = Percentile(values, p);
  return d;
}

Metrics ComputeMetrics(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo,
                       const std::vector<double>& percentiles) {
  Metrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end) for peak concurrency
  int64_t chunks = 0, good = 0;
  double pass_sum = 0, accept_sum = 0;
  int64_t pass_n = 0, accept_n = 0;
  for (const RequestRecord& r : records) {
    edges.emplace_back(r.start_s, +1);
    edges.emplace_back(r.start_s + r.e2e_s, -1);
    if (!r.ok) {
      ++m.failed;
      if (m.errors.size() < 5) m.errors.push_back(r.error);
      continue;
    }
    ++m.completed;
    m.total_input += r.prompt_tokens;
    m.total_output += r.output_tokens;
    chunks += r.chunks;
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.e2e_s * 1e3);
    for (double g : r.itl_s) itl.push_back(g * 1e3);
    double request_tpot = 0;  // vLLM: a request of <= 1 output token has TPOT 0 for goodput
    if (r.output_tokens > 1) {
      request_tpot = (r.e2e_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1);
      // An answer that arrived in one chunk (a server that wrote the whole stream at once) has no
      // time after its first token to divide: its TPOT would be ~0 and its decode speed
      // unbounded, so it stays out of the TPOT distribution (it still counts for goodput).
      if (r.chunks > 1) tpot.push_back(request_tpot);
    }
    if (slo.Any()) {
      const bool ok = (slo.ttft_ms < 0 || r.ttft_s * 1e3 <= slo.ttft_ms) &&
                      (slo.tpot_ms < 0 || request_tpot <= slo.tpot_ms) &&
                      (slo.e2el_ms < 0 || r.e2e_s * 1e3 <= slo.e2el_ms);
      good += ok ? 1 : 0;
    }
    if (r.tokens_per_pass >= 0) pass_sum += r.tokens_per_pass, ++pass_n;
    if (r.mean_accepted >= 0) accept_sum += r.mean_accepted, ++accept_n;
  }
  // Ends sort before starts at the same instant: back-to-back requests do not overlap.
  std::sort(edges.begin(), edges.end());
  int64_t in_flight = 0;
  for (const auto& [t, d] : edges) {
    in_flight += d;
    m.peak_concurrency = std::max(m.peak_concurrency, in_flight);
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  }
  if (slo.Any()) {
    m.good_completed = good;
    m.request_goodput = duration_s > 0 ? static_cast<double>(good) / duration_s : 0;
  }
  m.tokens_per_chunk = chunks > 0 ? static_cast<double>(m.total_output) / chunks : 0;
  m.tokens_per_pass = pass_n > 0 ? pass_sum / static_cast<double>(pass_n) : -1;
  m.mean_accepted = accept_n > 0 ? accept_sum / static_cast<double>(accept_n) : -1;
  m.ttft_ms = Summarize(std::move(ttft), percentiles);
  m.tpot_ms = Summarize(std::move(tpot), percentiles);
  m.itl_ms = Summarize(std::move(itl), percentiles);
  m.e2el_ms = Summarize(std::move(e2el), percentiles);
  return m;
}

std::vector<double> ArrivalOffsets(int64_t n, double rate, double burstiness, uint64_t seed) {
  Check(n >= 0, "the number of requests must be >= 0 (got {})", n);
  Check(rate > 0, "--request-rate must be > 0 or inf (got {})", rate);
  Check(burstiness > 0, "--burstiness must be > 0 (got {})", burstiness);
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return out;
  std::mt19937_64 rng(seed);
  // Gamma(shape k, scale theta) has mean k * theta: theta = 1 / (rate * k) gives mean 1 / rate.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0;
  for (int64_t i = 0; i < n; ++i) {
    t += gap(rng);
    out[static_cast<size_t>(i)] = t;
  }
  return out;
}

namespace {

json DistributionJson(const Distribution& d) {
  json j = {{"n", d.n},     {"mean", d.mean}, {"median", d.median},
            {"std", d.std}, {"min", d.min},   {"max", d.max}};
  for (const auto& [p, v] : d.percentiles) {
    std::string key = fmt::format("p{}", p);
    j[key] = v;
  }
  return j;
}

// vLLM's flat keys: mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms.
void FlatKeys(json& j, const char* name, const Distribution& d) {
  j[fmt::format("mean_{}_ms", name)] = d.mean;
  j[fmt::format("median_{}_ms", name)] = d.median;
  j[fmt::format("std_{}_ms", name)] = d.std;
  for (const auto& [p, v] : d.percentiles) j[fmt::format("p{}_{}_ms", p, name)] = v;
}

}  // namespace

json MetricsJson(const Metrics& m) {
  json j = {{"completed", m.completed},
            {"failed", m.failed},
            {"duration", m.duration_s},
            {"total_input_tokens", m.total_input},
            {"total_output_tokens", m.total_output},
            {"request_throughput", m.request_throughput},
            {"output_throughput", m.output_throughput},
            {"total_token_throughput", m.total_token_throughput},
            {"request_goodput", m.request_goodput >= 0 ? json(m.request_goodput) : json(nullptr)},
            {"good_completed", m.good_completed >= 0 ? json(m.good_completed) : json(nullptr)},
            {"max_concurrent_requests", m.peak_concurrency},
            {"tokens_per_chunk", m.tokens_per_chunk},
            {"tokens_per_pass", m.tokens_per_pass >= 0 ? json(m.tokens_per_pass) : json(nullptr)},
            {"mean_accepted", m.mean_accepted >= 0 ? json(m.mean_accepted) : json(nullptr)}};
  FlatKeys(j, "ttft", m.ttft_ms);
  FlatKeys(j, "tpot", m.tpot_ms);
  FlatKeys(j, "itl", m.itl_ms);
  FlatKeys(j, "e2el", m.e2el_ms);
  j["ttft_ms"] = DistributionJson(m.ttft_ms);
  j["tpot_ms"] = DistributionJson(m.tpot_ms);
  j["itl_ms"] = DistributionJson(m.itl_ms);
  j["e2el_ms"] = DistributionJson(m.e2el_ms);
  j["errors"] = m.errors;
  return j;
}

std::vector<std::string> SseSplitter::Feed(const char* data, size_t n) {
  buffer_.append(data, n);
  std::vector<std::string> out;
  for (;;) {
    size_t end = buffer_.find("\n\n"), skip = 2;
    const size_t crlf = buffer_.find("\r\n\r\n");
    if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) end = crlf, skip = 4;
    if (end == std::string::npos) break;
    const std::string event = buffer_.substr(0, end);
    buffer_.erase(0, end + skip);
    // An event may carry several lines; the data lines are joined with "\n" (the SSE spec).
    std::string payload;
    bool any = false;
    std::istringstream lines(event);
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) != 0) continue;
      std::string v = line.substr(5);
      if (!v.empty() && v[0] == ' ') v.erase(0, 1);
      payload += (any ? "\n" : "") + v;
      any = true;
    }
    if (any) out.push_back(std::move(payload));
  }
  return out;
}

namespace {

bool NonEmptyString(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

}  // namespace

bool ParseStreamEvent(const std::string& data, double t_s, RequestRecord& rec,
                      double& last_chunk_s) {
  if (data == "[DONE]") return true;
  json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    rec.error = "unparsable stream event: " + data.substr(0, 200);
    return false;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    rec.error = "server error event: " + e->dump().substr(0, 300);
    return false;
  }
  bool text = false;
  if (auto c = j.find("choices"); c != j.end() && c->is_array()) {
    for (const json& choice : *c) {
      if (!choice.is_object()) continue;
      if (NonEmptyString(choice, "text")) text = true;
      if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
        if (NonEmptyString(*d, "content") || NonEmptyString(*d, "reasoning_content")) text = true;
        if (auto tc = d->find("tool_calls"); tc != d->end() && tc->is_array() && !tc->empty())
          text = true;
      }
    }
  }
  if (text) {
    if (rec.chunks == 0) {
      rec.ttft_s = t_s;
    } else {
      rec.itl_s.push_back(t_s - last_chunk_s);
    }
    last_chunk_s = t_s;
    ++rec.chunks;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer())
      rec.prompt_tokens = p->get<int64_t>();
    if (auto o = u->find("completion_tokens"); o != u->end() && o->is_number_integer())
      rec.output_tokens = o->get<int64_t>();
  }
  if (auto t = j.find("timings"); t != j.end() && t->is_object()) {
    if (auto n = t->find("predicted_n");
        n != t->end() && n->is_number_integer() && rec.output_tokens == 0)
      rec.output_tokens = n->get<int64_t>();
    if (auto p = t->find("tokens_per_pass"); p != t->end() && p->is_number())
      rec.tokens_per_pass = p->get<double>();
    if (auto a = t->find("mean_accepted"); a != t->end() && a->is_number())
      rec.mean_accepted = a->get<double>();
  }
  return true;
}

}  // namespace crossword::tools::servebench
