// The load generator of `crossword bench serve` (see serve_bench_client.h).
#include "tools/serve_bench_client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "base/error.h"

namespace crossword::tools::servebench {

using json = nlohmann::ordered_json;

Target ParseUrl(const std::string& url) {
  Target t;
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else {
    Check(rest.find("://") == std::string::npos, "--url: only http:// is supported (got '{}')",
          url);
  }
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  Check(colon != std::string::npos && colon > 0, "--url: '{}' has no HOST:PORT", url);
  t.host = rest.substr(0, colon);
  char* end = nullptr;
  const long port = std::strtol(rest.c_str() + colon + 1, &end, 10);
  Check(*end == '\0' && port > 0 && port < 65536, "--url: bad port in '{}'", url);
  t.port = static_cast<int>(port);
  return t;
}

namespace {

httplib::Client MakeClient(const Target& t, double timeout_s) {
  httplib::Client cli(t.host, t.port);
  const auto sec = static_cast<time_t>(timeout_s);
  const auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(sec, usec);
  cli.set_write_timeout(sec, usec);
  if (!t.api_key.empty()) cli.set_bearer_token_auth(t.api_key);
  return cli;
}

json PostJson(const Target& t, const std::string& path, const json& body) {
  httplib::Client cli = MakeClient(t, t.timeout_s);
  auto res = cli.Post(path, body.dump(), "application/json");
  Check(static_cast<bool>(res), "POST {} to {}:{} failed: {}", path, t.host, t.port,
        httplib::to_string(res.error()));
  Check(res->status == 200, "POST {} answered {}: {}", path, res->status, res->body.substr(0, 300));
  json j = json::parse(res->body, nullptr, false);
  Check(!j.is_discarded(), "POST {}: the answer is not JSON", path);
  return j;
}

}  // namespace

int HttpGet(const Target& t, const std::string& path, std::string* body, double timeout_s) {
  httplib::Client cli = MakeClient(t, timeout_s);
  auto res = cli.Get(path);
  if (!res) return 0;
  if (body) *body = res->body;
  return res->status;
}

std::vector<int32_t> Tokenize(const Target& t, const std::string& text) {
  const json j = PostJson(t, "/tokenize", {{"content", text}});
  Check(j.contains("tokens") && j["tokens"].is_array(), "/tokenize: no \"tokens\" array");
  std::vector<int32_t> ids;
  for (const json& v : j["tokens"]) {
    // llama-server answers ids, or {"id", "piece"} objects with with_pieces.
    ids.push_back(v.is_object() ? v.at("id").get<int32_t>() : v.get<int32_t>());
  }
  return ids;
}

std::string Detokenize(const Target& t, const std::vector<int32_t>& ids) {
  const json j = PostJson(t, "/detokenize", {{"tokens", ids}});
  Check(j.contains("content") && j["content"].is_string(), "/detokenize: no \"content\" string");
  return j["content"].get<std::string>();
}

ChatAnswer Chat(const Target& t, const std::string& question, int max_tokens) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", question}}})},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", false}};
  if (!t.model.empty()) body["model"] = t.model;
  const auto t0 = std::chrono::steady_clock::now();
  const json j = PostJson(t, "/v1/chat/completions", body);
  ChatAnswer a;
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const json& m = j["choices"][0].value("message", json::object());
    for (const char* k : {"reasoning_content", "content"}) {
      if (m.contains(k) && m[k].is_string()) a.text += m[k].get<std::string>() + " ";
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
      a.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
      a.completion_tokens = u["completion_tokens"].get<int64_t>();
  }
  return a;
}

std::string AskChat(const Target& t, const std::string& question, int max_tokens) {
  return Chat(t, question, max_tokens).text;
}

std::string DatasetText(const std::string& dataset, size_t max_chars, uint64_t seed) {
  std::string text;
  if (dataset == "random") {
    // Pronounceable random words: BPE vocabularies cut them into a few tokens each, as text.
    static constexpr const char* kOnset[] = {"b", "c", "d", "f", "g", "h", "k",  "l",  "m",  "n",
                                             "p", "r", "s", "t", "v", "w", "st", "tr", "pl", "gr"};
    static constexpr const char* kVowel[] = {"a", "e", "i", "o", "u", "ai", "ea", "ou"};
    std::mt19937_64 rng(seed);
    while (text.size() < max_chars) {
      const int syllables = 1 + static_cast<int>(rng() % 3);
      for (int s = 0; s < syllables; ++s) {
        text += kOnset[rng() % std::size(kOnset)];
        text += kVowel[rng() % std::size(kVowel)];
      }
      text += (rng() % 12 == 0) ? ". " : " ";
    }
  } else if (dataset == "bible") {
    // bible-kjv stores the text compressed; its program prints it.
    FILE* p = popen("bible 'gen1:1-rev22:21' 2>/dev/null", "r");
    Check(p != nullptr, "dataset bible: cannot run `bible` (install the Debian package bible-kjv)");
    char buf[65536];
    size_t n;
    while (text.size() < max_chars && (n = fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
    pclose(p);
    Check(!text.empty(), "dataset bible: `bible` printed nothing (install bible-kjv)");
  } else {
    std::string path = dataset;
    if (dataset == "fortunes") {
      path = "/usr/share/games/fortunes/fortunes";
    } else {
      Check(dataset.rfind("file:", 0) == 0,
            "--dataset: '{}' is not random, bible, fortunes or file:PATH", dataset);
      path = dataset.substr(5);
    }
    std::ifstream in(path);
    Check(in.good(), "dataset {}: cannot read {}{}", dataset, path,
          dataset == "fortunes" ? " (install the Debian package fortunes-min)" : "");
    std::string line;
    while (text.size() < max_chars && std::getline(in, line)) {
      if (dataset == "fortunes" && line == "%") continue;  // cookie separator
      text += line;
      text += '\n';
    }
    Check(!text.empty(), "dataset {}: {} is empty", dataset, path);
  }
  if (text.size() > max_chars) text.resize(max_chars);
  return text;
}

std::vector<RequestSpec> BuildRequests(const std::vector<int32_t>& corpus_ids,
                                       const RequestShape& shape) {
  Check(shape.num_prompts >= 1, "--num-prompts must be >= 1 (got {})", shape.num_prompts);
  Check(shape.input_len >= 1, "--input-len must be >= 1 (got {})", shape.input_len);
  Check(shape.output_len >= 1, "--output-len must be >= 1 (got {})", shape.output_len);
  Check(shape.range_ratio >= 0 && shape.range_ratio < 1, "--range-ratio must be in [0, 1) (got {})",
        shape.range_ratio);
  Check(!corpus_ids.empty(), "the dataset tokenized to no tokens");
  std::mt19937_64 rng(shape.seed ^ 0x9e3779b97f4a7c15ULL);
  auto draw = [&](int64_t len) {
    const auto lo =
        static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - shape.range_ratio)));
    const auto hi =
        static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1 + shape.range_ratio)));
    return std::max<int64_t>(1, std::uniform_int_distribution<int64_t>(lo, hi)(rng));
  };
  const auto total = static_cast<int64_t>(corpus_ids.size());
  std::vector<RequestSpec> out;
  for (int64_t i = 0; i < shape.num_prompts; ++i) {
    RequestSpec r;
    r.prompt_tokens = draw(shape.input_len);
    r.max_tokens = draw(shape.output_len);
    // Window i starts i / n of the way through the corpus; a short corpus repeats cyclically.
    const int64_t start = (total * i) / shape.num_prompts;
    r.prompt_ids.reserve(static_cast<size_t>(r.prompt_tokens));
    for (int64_t k = 0; k < r.prompt_tokens; ++k)
      r.prompt_ids.push_back(corpus_ids[static_cast<size_t>((start + k) % total)]);
    out.push_back(std::move(r));
  }
  return out;
}

json RequestBody(const Target& t, const RequestSpec& r, const json& extra_body) {
  json body = json::object();
  if (!t.model.empty()) body["model"] = t.model;
  if (t.Chat()) {
    body["messages"] = json::array({{{"role", "user"}, {"content", r.prompt_text}}});
  } else {
    body["prompt"] = r.prompt_ids;
  }
  body["max_tokens"] = r.max_tokens;
  body["temperature"] = 0;
  body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (extra_body.is_object()) body.update(extra_body, /*merge_objects=*/true);
  return body;
}

RequestRecord SendRequest(const Target& t, const RequestSpec& r, const json& extra_body,
                          Clock::time_point epoch) {
  RequestRecord rec;
  rec.prompt_tokens = r.prompt_tokens;
  httplib::Client cli = MakeClient(t, t.timeout_s);
  httplib::Request req;
  req.method = "POST";
  req.path = t.endpoint;
  req.body = RequestBody(t, r, extra_body).dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  SseSplitter sse;
  double last_chunk_s = 0;
  bool event_error = false;
  std::string error_body;
  int status = 0;
  const Clock::time_point t0 = Clock::now();
  auto since = [&t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  req.response_handler = [&status](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double now = since();
    if (status != 200) {
      error_body.append(data, std::min<size_t>(n, 300));
      return true;
    }
    for (const std::string& payload : sse.Feed(data, n)) {
      if (!ParseStreamEvent(payload, now, rec, last_chunk_s)) {
        event_error = true;
        return false;
      }
    }
    return true;
  };
  rec.start_s = std::chrono::duration<double>(t0 - epoch).count();
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  rec.e2e_s = since();
  if (event_error) return rec;  // rec.error set by the parser
  if (!sent || err != httplib::Error::Success) {
    rec.error = "transport: " + httplib::to_string(err);
    return rec;
  }
  if (status != 200) {
    rec.error = fmt::format("HTTP {}: {}", status, error_body);
    return rec;
  }
  if (rec.chunks == 0) {
    rec.error = "the stream carried no text";
    return rec;
  }
  if (rec.output_tokens == 0) rec.output_tokens = rec.chunks;  // server reported no counts
  rec.ok = true;
  return rec;
}

RunResult RunLoad(const Target& t, const std::vector<RequestSpec>& requests, const json& extra_body,
                  const LoadOptions& load) {
  const auto n = static_cast<int64_t>(requests.size());
  const std::vector<double> offsets =
      ArrivalOffsets(n, load.request_rate, load.burstiness, load.seed);
  RunResult result;
  result.records.resize(requests.size());
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  int64_t done = 0;
  std::vector<std::thread> threads;
  threads.reserve(requests.size());
  const Clock::time_point epoch = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(
        epoch + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(offsets[static_cast<size_t>(i)])));
    {
      // The cap holds a request back after its arrival time (vLLM's semaphore does the same).
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return load.max_concurrency <= 0 || in_flight < load.max_concurrency; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      RequestRecord rec = SendRequest(t, requests[static_cast<size_t>(i)], extra_body, epoch);
      std::lock_guard lk(mu);
      result.records[static_cast<size_t>(i)] = std::move(rec);
      --in_flight;
      ++done;
      if (load.progress) load.progress(done, n);
      cv.notify_all();
    });
  }
  for (std::thread& th : threads) th.join();
  // From the run's start (the first arrival is at or after it) to the last byte.
  for (const RequestRecord& r : result.records)
    result.duration_s = std::max(result.duration_s, r.start_s + r.e2e_s);
  return result;
}

}  // namespace crossword::tools::servebench
