// Tests of `crossword bench serve`: the metrics math on hand-computed records, numpy's percentile,
// arrivals, the SSE parser, the load guard on a fake /proc, and the client against a fake server
// whose chunks arrive at known times.
#include "tools/serve_bench.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "tools/load_guard.h"
#include "tools/serve_bench_client.h"

namespace crossword::tools::servebench {
namespace {

using json = nlohmann::ordered_json;

TEST(ServeBenchMetrics, PercentileIsNumpyLinear) {
  // numpy.percentile([1, 2, 3, 4], [50, 99, 0, 100]) = [2.5, 3.97, 1, 4].
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_NEAR(Percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  const Distribution d = Summarize({4, 1, 3, 2}, {25});
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.std, std::sqrt(1.25));  // population std: numpy.std
  EXPECT_DOUBLE_EQ(d.percentiles.at(25), 1.75);
}

RequestRecord Ok(double start, double ttft, double e2e, int64_t in, int64_t out,
                 std::vector<double> itl) {
  RequestRecord r;
  r.ok = true;
  r.start_s = start;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.prompt_tokens = in;
  r.output_tokens = out;
  r.chunks = static_cast<int64_t>(itl.size()) + 1;
  r.itl_s = std::move(itl);
  return r;
}

TEST(ServeBenchMetrics, HandComputedRun) {
  std::vector<RequestRecord> recs;
  recs.push_back(Ok(0.0, 0.1, 0.5, 10, 5, {0.1, 0.1, 0.1, 0.1}));  // TPOT 0.4 / 4 = 100 ms
  recs.push_back(Ok(0.2, 0.3, 0.6, 20, 4, {0.1, 0.2}));            // TPOT 0.3 / 3 = 100 ms
  recs.push_back(Ok(0.85, 0.05, 0.05, 5, 1, {}));                  // 1 token: no TPOT
  RequestRecord failed;
  failed.start_s = 0.9;
  failed.e2e_s = 0.01;
  failed.error = "HTTP 500: boom";
  recs.push_back(failed);
  const Metrics m = ComputeMetrics(recs, 1.0, ParseSlo("ttft:150 tpot:120"), {50, 99});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0], "HTTP 500: boom");
  EXPECT_EQ(m.total_input, 35);
  EXPECT_EQ(m.total_output, 10);
  EXPECT_DOUBLE_EQ(m.request_throughput, 3.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 10.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 45.0);
  EXPECT_EQ(m.peak_concurrency, 2);  // [0, 0.5] and [0.2, 0.8] overlap; the rest do not
  EXPECT_EQ(m.tpot_ms.n, 2);
  EXPECT_NEAR(m.tpot_ms.mean, 100.0, 1e-9);
  EXPECT_EQ(m.ttft_ms.n, 3);
  // The whole answer in one chunk: no time after the first token, so no TPOT sample.
  std::vector<RequestRecord> bunched = {Ok(0.0, 0.1, 0.1001, 8, 16, {})};
  EXPECT_EQ(ComputeMetrics(bunched, 1.0, {}, {50}).tpot_ms.n, 0);
  EXPECT_NEAR(m.ttft_ms.median, 100.0, 1e-9);
  EXPECT_NEAR(m.ttft_ms.mean, 150.0, 1e-9);
  EXPECT_EQ(m.itl_ms.n, 6);
  EXPECT_NEAR(m.itl_ms.mean, 700.0 / 6, 1e-9);
  EXPECT_NEAR(m.itl_ms.percentiles.at(99), 195.0, 1e-9);  // 5 x 100, one 200: rank 4.95
  EXPECT_NEAR(m.e2el_ms.max, 600.0, 1e-9);
  // Good: the first (TTFT 100, TPOT 100) and the 1-token one (TPOT 0); the second has TTFT 300.
  EXPECT_EQ(m.good_completed, 2);
  EXPECT_DOUBLE_EQ(m.request_goodput, 2.0);
  EXPECT_NEAR(m.tokens_per_chunk, 10.0 / 9.0, 1e-12);  // 5 + 3 + 1 chunks
  const json j = MetricsJson(m);
  EXPECT_NEAR(j["p99_itl_ms"].get<double>(), 195.0, 1e-9);
  EXPECT_NEAR(j["median_ttft_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_TRUE(ComputeMetrics(recs, 1.0, Slo{}, {99}).request_goodput < 0);
}

TEST(ServeBenchMetrics, ParseSlo) {
  const Slo s = ParseSlo("ttft:500,e2el:2000");
  EXPECT_EQ(s.ttft_ms, 500);
  EXPECT_EQ(s.e2el_ms, 2000);
  EXPECT_LT(s.tpot_ms, 0);
  EXPECT_FALSE(ParseSlo("").Any());
  EXPECT_THROW(ParseSlo("ttft=5"), Error);
  EXPECT_THROW(ParseSlo("itl:5"), Error);
  EXPECT_THROW(ParseSlo("ttft:abc"), Error);
  EXPECT_THROW(ParseSlo("ttft:-1"), Error);
}

TEST(ServeBenchArrivals, PoissonAndGamma) {
  for (double v : ArrivalOffsets(5, std::numeric_limits<double>::infinity(), 1, 0)) EXPECT_EQ(v, 0);
  for (double burst : {1.0, 4.0}) {
    const std::vector<double> t = ArrivalOffsets(20000, 10.0, burst, 7);
    EXPECT_EQ(t, ArrivalOffsets(20000, 10.0, burst, 7));  // seeded
    double sum = 0, sq = 0, prev = 0;
    for (double x : t) {
      ASSERT_GE(x, prev);
      sum += x - prev;
      sq += (x - prev) * (x - prev);
      prev = x;
    }
    const double mean = sum / 20000, cv = std::sqrt(sq / 20000 - mean * mean) / mean;
    EXPECT_NEAR(mean, 0.1, 0.004);                // 1 / rate
    EXPECT_NEAR(cv, 1 / std::sqrt(burst), 0.03);  // gamma of shape k: CV = 1 / sqrt(k)
  }
  EXPECT_THROW(ArrivalOffsets(3, 0, 1, 0), Error);
}

TEST(ServeBenchStream, SplitterAndEvents) {
  SseSplitter s;
  const std::string a = "data: {\"a\"", b = ":1}\n\ndata: [DONE]\r\n\r\n: comment\n\n";
  EXPECT_TRUE(s.Feed(a.data(), a.size()).empty());  // an event split across reads
  auto got = s.Feed(b.data(), b.size());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "{\"a\":1}");
  EXPECT_EQ(got[1], "[DONE]");

  RequestRecord r;
  double last = 0;
  // A role-only first chunk (crossword and OpenAI send one) is not a token.
  EXPECT_TRUE(ParseStreamEvent(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 0.05,
                               r, last));
  EXPECT_EQ(r.chunks, 0);
  EXPECT_TRUE(ParseStreamEvent(R"({"choices":[{"delta":{"content":"Hi"}}]})", 0.2, r, last));
  EXPECT_TRUE(
      ParseStreamEvent(R"({"choices":[{"delta":{"reasoning_content":"x"}}]})", 0.25, r, last));
  EXPECT_TRUE(ParseStreamEvent(
      R"({"choices":[{"delta":{},"finish_reason":"length"}],"timings":{"predicted_n":9,"tokens_per_pass":2.5}})",
      0.3, r, last));
  EXPECT_TRUE(ParseStreamEvent(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}})", 0.3, r, last));
  EXPECT_TRUE(ParseStreamEvent("[DONE]", 0.3, r, last));
  EXPECT_EQ(r.chunks, 2);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.2);
  ASSERT_EQ(r.itl_s.size(), 1u);
  EXPECT_NEAR(r.itl_s[0], 0.05, 1e-12);
  EXPECT_EQ(r.output_tokens, 7);  // usage wins over timings
  EXPECT_EQ(r.prompt_tokens, 12);
  EXPECT_DOUBLE_EQ(r.tokens_per_pass, 2.5);
  EXPECT_FALSE(ParseStreamEvent(R"({"error":{"message":"no"}})", 0.4, r, last));
  EXPECT_NE(r.error.find("no"), std::string::npos);
  EXPECT_FALSE(ParseStreamEvent("{not json", 0.4, r, last));
}

class FakeProc {
 public:
  FakeProc() {
    root_ =
        std::filesystem::temp_directory_path() / ("serve_bench_proc_" + std::to_string(getpid()));
    std::filesystem::create_directories(root_ / "4242");
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }
  // user nice system idle iowait irq softirq steal over 2 CPUs; pid 4242's utime+stime+cu+cs.
  void Write(uint64_t user, uint64_t idle, uint64_t own) {
    std::ofstream(root_ / "stat") << "cpu  " << user << " 0 0 " << idle
                                  << " 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0\ncpu1 1 0 0 1 0 0 0 0\n"
                                  << "intr 1 2 3\n";
    std::ofstream(root_ / "4242" / "stat")
        << "4242 (a (weird) name) S 1 1 1 0 -1 0 0 0 0 0 " << own << " 0 0 0 20 0\n";
    std::ofstream(root_ / "loadavg") << "3.50 2.00 1.00 1/100 4242\n";
  }
  std::string root() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

TEST(ServeBenchLoadGuard, RepeatsWhileOthersAreBusy) {
  FakeProc proc;
  LoadGuard guard(proc.root(), {4242}, 0.5, 2);
  proc.Write(1000, 1000, 100);
  guard.Begin();
  // 400 ticks elapsed over 2 CPUs = 200 per CPU; busy +200 of which the server's +50: 0.75 cores.
  proc.Write(1200, 1200, 150);
  const GuardSample busy = guard.End();
  EXPECT_NEAR(busy.other_cores, 0.75, 1e-12);
  EXPECT_DOUBLE_EQ(busy.loadavg, 3.5);
  EXPECT_TRUE(busy.busy);
  EXPECT_TRUE(guard.ShouldRepeat(busy, 0));
  EXPECT_TRUE(guard.ShouldRepeat(busy, 1));
  EXPECT_FALSE(guard.ShouldRepeat(busy, 2));  // bounded
  guard.Begin();
  // busy +200, all of it the server's: nobody else ran.
  proc.Write(1400, 1400, 350);
  const GuardSample quiet = guard.End();
  EXPECT_NEAR(quiet.other_cores, 0.0, 1e-12);
  EXPECT_FALSE(quiet.busy);
  EXPECT_FALSE(guard.ShouldRepeat(quiet, 0));
  // Disabled guard never repeats; a vanished process counts 0.
  LoadGuard off(proc.root(), {4242, 99999}, -1, 2);
  off.Begin();
  proc.Write(1800, 1400, 350);
  const GuardSample s = off.End();
  EXPECT_NEAR(s.other_cores, 2.0, 1e-12);
  EXPECT_FALSE(off.ShouldRepeat(s, 0));
}

TEST(ServeBenchLoadGuard, BadProcIsAnError) {
  EXPECT_THROW(ReadCpuTimes("/nonexistent-proc", {}), Error);
}

// A fake OpenAI server: each streamed completion sends its first 2-token chunk after kFirst ms and
// two more 2-token chunks kGap ms apart, then usage (6 tokens).
constexpr int kFirst = 150, kGap = 80;

class FakeServer {
 public:
  FakeServer() {
    http_.Post("/tokenize", [](const httplib::Request& q, httplib::Response& r) {
      const json body = json::parse(q.body);
      json ids = json::array();
      for (char c : body["content"].get<std::string>()) ids.push_back(static_cast<int>(c));
      r.set_content(json({{"tokens", ids}}).dump(), "application/json");
    });
    http_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
      last_body_ = q.body;
      if (fail_.load()) {
        r.status = 500;
        r.set_content("{\"error\":\"boom\"}", "application/json");
        return;
      }
      auto step = std::make_shared<int>(0);
      r.set_chunked_content_provider("text/event-stream", [step](size_t, httplib::DataSink& sink) {
        const int i = (*step)++;
        std::string ev;
        if (i < 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? kFirst : kGap));
          ev = "data: {\"choices\":[{\"text\":\"ab\",\"index\":0}]}\n\n";
        } else {
          ev = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":6}}"
               "\n\ndata: [DONE]\n\n";
        }
        sink.write(ev.data(), ev.size());
        if (i >= 3) sink.done();
        return true;
      });
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    while (!http_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~FakeServer() {
    http_.stop();
    thread_.join();
  }
  Target target() const {
    Target t;
    t.port = port_;
    t.timeout_s = 30;
    return t;
  }
  std::string last_body_;
  std::atomic<bool> fail_{false};

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
};

TEST(ServeBenchClient, MeasuresKnownTimingsOfAFakeServer) {
  FakeServer server;
  const Target t = server.target();
  const std::vector<int32_t> corpus = Tokenize(t, "hello world");
  ASSERT_EQ(corpus.size(), 11u);
  const std::vector<RequestSpec> reqs = BuildRequests(corpus, {3, 4, 6, 0, 1});
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1].prompt_ids, (std::vector<int32_t>{'l', 'o', ' ', 'w'}));  // window at 11 / 3

  LoadOptions load;
  load.max_concurrency = 1;
  int64_t progressed = 0;
  load.progress = [&](int64_t d, int64_t) { progressed = d; };
  const RunResult run = RunLoad(t, reqs, json::object(), load);
  EXPECT_EQ(progressed, 3);
  const json body = json::parse(server.last_body_);
  EXPECT_EQ(body["max_tokens"], 6);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["prompt"].size(), 4u);

  const Metrics m = ComputeMetrics(run.records, run.duration_s, Slo{}, {50, 99});
  ASSERT_EQ(m.completed, 3) << (m.errors.empty() ? "" : m.errors[0]);
  EXPECT_EQ(m.peak_concurrency, 1);
  EXPECT_EQ(m.total_output, 18);
  EXPECT_EQ(m.total_input, 21);               // the server's usage, not the dataset's 12
  EXPECT_DOUBLE_EQ(m.tokens_per_chunk, 2.0);  // parallel-mode chunks: ITL != TPOT
  // Lower bounds are exact (the server sleeps at least that long); upper bounds leave room for a
  // loaded machine.
  const double slack = 400;
  EXPECT_GE(m.ttft_ms.min, kFirst);
  EXPECT_LT(m.ttft_ms.max, kFirst + slack);
  EXPECT_EQ(m.itl_ms.n, 6);
  // Chunk timestamps are taken on arrival: a chunk read late on a loaded machine shortens the gap
  // to the next one (a clean-clone run saw 76.9 ms for an 80 ms gap), so the exact bound is on the
  // sum (E2EL below) and a single gap only has to be clearly a gap.
  EXPECT_GE(m.itl_ms.min, kGap / 2);
  EXPECT_LT(m.itl_ms.max, kGap + slack);
  // TPOT = (E2EL - TTFT) / 5 ~ 2 * 80 / 5 = 32 ms; E2EL ~ 310 ms.
  EXPECT_GE(m.tpot_ms.min, 2.0 * kGap / 5 - 1);
  EXPECT_LT(m.tpot_ms.max, (2.0 * kGap + slack) / 5);
  EXPECT_GE(m.e2el_ms.min, kFirst + 2 * kGap);
  EXPECT_GE(run.duration_s, 3 * (kFirst + 2 * kGap) / 1e3);  // one at a time
  EXPECT_NEAR(m.request_throughput, 3 / run.duration_s, 1e-9);
  EXPECT_NEAR(m.output_throughput, 18 / run.duration_s, 1e-9);

  // Unlimited concurrency: all three overlap.
  const RunResult all = RunLoad(t, reqs, json::object(), LoadOptions{});
  EXPECT_EQ(ComputeMetrics(all.records, all.duration_s, Slo{}, {50}).peak_concurrency, 3);

  server.fail_ = true;
  const RequestRecord bad = SendRequest(t, reqs[0], json::object(), Clock::now());
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.error.find("HTTP 500"), std::string::npos) << bad.error;
}

TEST(ServeBenchClient, FindsTheListeningProcess) {
  FakeServer server;
  EXPECT_EQ(FindListeningPid("/proc", server.target().port), getpid());
  Target dead;
  dead.port = 1;
  EXPECT_EQ(HttpGet(dead, "/health", nullptr, 1), 0);
}

TEST(ServeBenchClient, ParseUrlAndDatasets) {
  const Target t = ParseUrl("http://localhost:1234/v1");
  EXPECT_EQ(t.host, "localhost");
  EXPECT_EQ(t.port, 1234);
  EXPECT_THROW(ParseUrl("https://x:1"), Error);
  EXPECT_THROW(ParseUrl("http://x"), Error);
  const std::string a = DatasetText("random", 1000, 3);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(a, DatasetText("random", 1000, 3));
  EXPECT_NE(a, DatasetText("random", 1000, 4));
  EXPECT_THROW(DatasetText("nope", 10, 0), Error);
  EXPECT_THROW(DatasetText("file:/nonexistent", 10, 0), Error);
}

}  // namespace
}  // namespace crossword::tools::servebench
