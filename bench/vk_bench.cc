// crossword-vk-bench: micro-benchmarks of the Vulkan backend's runtime and shaders at Clover's
// shapes (docs/gpu.md): read bandwidth, dispatch overhead (recorded once and replayed vs
// re-recorded), each mat-vec in GB/s, the grouped MoE block at 1-32 rows with random and
// clustered routing, the GDN recurrence at T = 1 and 32, decode attention at a few context
// lengths. Times are GPU timestamps where the device has them (else host wall time around
// submit + wait), medians over --reps runs after one warm-up run; JSON on stdout or --json.
// Not part of make test. Example (lavapipe dry run): crossword-vk-bench --small --reps 3
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/vulkan/ops.h"
#include "base/error.h"
#include "bench_main.h"

namespace crossword::vulkan {
namespace {

using json = nlohmann::json;

struct Options {
  bool small = false;
  int reps = 5;
  int device = -1;
  bool validation = false;
  std::string path = "auto";
  std::string only;
  bool moe_stages = false;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Random bytes (valid enough for timing; the values do not change the work done).
std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    const uint32_t r = rng() & 0x3bff3bffu;  // keeps fp16 fields finite
    std::memcpy(&v[i], &r, 4);
  }
  return v;
}

class Bench {
 public:
  Bench(Device& dev, const Options& o)
      : dev_(dev), o_(o), pool_(dev, MemoryKind::kDevice), host_(dev, MemoryKind::kHost) {
    if (dev.info().timestamps) {
      VkQueryPoolCreateInfo qi = {};
      qi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = 2;
      CheckVk(vkCreateQueryPool(dev.device(), &qi, nullptr, &queries_), "vkCreateQueryPool");
    }
    params_ = host_.Allocate(256, "params");
    config_.mat_path = o.path == "int8"    ? MatPath::kInt8
                       : o.path == "float" ? MatPath::kFloat
                                           : MatPath::kAuto;
  }
  ~Bench() {
    if (queries_) vkDestroyQueryPool(dev_.device(), queries_, nullptr);
  }

  MemoryPool& pool() { return pool_; }
  json& results() { return results_; }
  bool Want(const std::string& group) const {
    return o_.only.empty() || o_.only.find(group) != std::string::npos;
  }

  // Records `fn` once (between timestamps) and returns the median time of a replay in ms.
  double Time(const std::function<void(CommandList&)>& fn, std::string* how = nullptr) {
    CommandList cl(dev_);
    cl.Begin(params_, config_);
    if (queries_) {
      vkCmdResetQueryPool(cl.handle(), queries_, 0, 2);
      vkCmdWriteTimestamp(cl.handle(), VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
    }
    fn(cl);
    if (queries_) {
      vkCmdWriteTimestamp(cl.handle(), VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, 1);
    }
    cl.End();
    cl.Run();  // warm-up (lavapipe compiles pipelines on first use)
    std::vector<double> ms;
    for (int r = 0; r < o_.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      cl.Run();
      const double wall =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (queries_) {
        uint64_t ts[2];
        CheckVk(vkGetQueryPoolResults(dev_.device(), queries_, 0, 2, sizeof(ts), ts, 8,
                                      VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                "vkGetQueryPoolResults");
        ms.push_back((ts[1] - ts[0]) * dev_.info().timestamp_period_ns * 1e-6);
      } else {
        ms.push_back(wall);
      }
    }
    if (how) *how = queries_ ? "gpu timestamps" : "host wall";
    return Median(ms);
  }

  void Add(json r) {
    std::fprintf(stderr, "%s\n", r.dump().c_str());
    results_.push_back(std::move(r));
  }

  void ReadBandwidth() {
    const uint64_t bytes = (o_.small ? uint64_t{32} : uint64_t{1024}) << 20;
    // One binding per probe: split the buffer into binding-sized parts.
    const uint64_t part = std::min<uint64_t>(bytes, dev_.max_binding_bytes() / 16 * 16 - 256);
    std::vector<BufferView> parts;
    for (uint64_t done = 0; done < bytes; done += part) {
      parts.push_back(pool_.Allocate(std::min(part, bytes - done), "read probe"));
    }
    const uint32_t groups = 1024;
    BufferView out = pool_.Allocate(groups * 4 * parts.size(), "probe out");
    std::string how;
    const double ms = Time(
        [&](CommandList& cl) {
          for (size_t i = 0; i < parts.size(); ++i) {
            ReadProbe(cl, parts[i], out.Sub(i * groups * 4, groups * 4), groups);
          }
        },
        &how);
    Add({{"name", "read_bandwidth"},
         {"bytes", bytes},
         {"ms", ms},
         {"gbps", bytes / ms * 1e-6},
         {"timing", how}});
  }

  // n dependent 256-element adds (each reads the previous result): recorded once and
  // replayed, against recorded and submitted anew each time (host wall time for both).
  void DispatchOverhead() {
    const int64_t n_el = 256;
    BufferView a = pool_.Allocate(n_el * 4, "a"), b = pool_.Allocate(n_el * 4, "b");
    for (int n : {100, 1000}) {
      auto record = [&](CommandList& cl) {
        cl.Begin(params_, config_);
        for (int i = 0; i < n; ++i) vulkan::Add(cl, i % 2 ? b : a, a, i % 2 ? a : b, n_el);
        cl.End();
      };
      CommandList cl(dev_);
      record(cl);
      cl.Run();
      std::vector<double> replay, rerecord;
      for (int r = 0; r < o_.reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        cl.Run();
        replay.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
        t0 = std::chrono::steady_clock::now();
        record(cl);
        cl.Run();
        rerecord.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      Add({{"name", "dispatch_overhead"},
           {"dispatches", n},
           {"barriers", cl.barrier_count()},
           {"replay_us_per_dispatch", Median(replay) / n},
           {"rerecord_us_per_dispatch", Median(rerecord) / n},
           {"timing", "host wall, submit to fence"}});
    }
  }

  void MatVec() {
    struct Shape {
      const char* what;
      int64_t n_in, n_out;
    };
    const int64_t head = o_.small ? 24832 : 248320;
    const Shape shapes[] = {{"gdn attn_qkv+attn_gate 2048->12288", 2048, o_.small ? 3072 : 12288},
                            {"ssm_out / attn_output 4096->2048", 4096, 2048},
                            {"output head 2048->248320", 2048, head},
                            {"expert gate+up 2048->1024", 2048, 1024},
                            {"expert down 512->2048", 512, 2048}};
    const GgmlType types[] = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K,
                              GgmlType::kF16};
    for (const Shape& s : shapes) {
      for (GgmlType type : types) {
        DeviceMatrix m = DeviceMatrix::Of(type, s.n_in, s.n_out);
        Uploader up(dev_);
        const std::vector<uint8_t> w = RandomBytes(*RowBytes(type, s.n_in) * s.n_out, 7);
        MemoryPool weights(dev_, MemoryKind::kDevice);
        UploadMatrix(weights, up, m, w.data(), "w");
        up.Run();
        for (int64_t rows : {int64_t{1}, int64_t{8}}) {
          if (o_.small && rows > 1 && s.n_out > 20000) continue;
          BufferView x = weights.Allocate(rows * s.n_in * 4, "x");
          BufferView xq = weights.Allocate(rows * ActQ8RowWords(type, s.n_in) * 4 + 4, "xq");
          BufferView y = weights.Allocate(rows * s.n_out * 4, "y");
          bool int8 = false;
          std::string how;
          const double ms = Time(
              [&](CommandList& cl) {
                int8 = cl.UsesInt8(type);
                MatMulArgs a;
                a.w = &m;
                a.x = x;
                a.ldx = s.n_in;
                a.xq = xq;
                a.ldxq = ActQ8RowWords(type, s.n_in);
                a.n_rows = rows;
                a.y = y;
                a.ldy = s.n_out;
                if (int8) QuantizeActivations(cl, type, x, s.n_in, rows, s.n_in, xq, a.ldxq);
                MatMul(cl, a);
              },
              &how);
          Add({{"name", "matvec"},
               {"shape", s.what},
               {"type", TypeName(type)},
               {"rows", rows},
               {"path", int8 ? "int8" : "float"},
               {"weight_bytes", m.bytes()},
               {"ms", ms},
               {"gbps", m.bytes() / ms * 1e-6},
               {"timing", how}});
        }
      }
    }
  }

  // The MoE block (route from given logits, group, gate/up, down, combine with the shared
  // expert) at T rows; bytes = weights of the distinct experts used + the shared expert.
  void Moe() {
    const int E = o_.small ? 64 : 256, k = 8;
    const int64_t D = o_.small ? 512 : 2048, F = 512;
    const GgmlType type = GgmlType::kQ4_0;
    MemoryPool weights(dev_, MemoryKind::kDevice);
    Uploader up(dev_);
    DeviceMatrix gu = DeviceMatrix::Of(type, D, 2 * F, E), dn = DeviceMatrix::Of(type, F, D, E),
                 sgu = DeviceMatrix::Of(type, D, 2 * F), sdn = DeviceMatrix::Of(type, F, D);
    const std::vector<uint8_t> wgu = RandomBytes(*RowBytes(type, D) * 2 * F * E, 1),
                               wdn = RandomBytes(*RowBytes(type, F) * D * E, 2);
    UploadMatrix(weights, up, gu, wgu.data(), "gate_up");
    UploadMatrix(weights, up, dn, wdn.data(), "down");
    UploadMatrix(weights, up, sgu, wgu.data(), "shexp gate_up");
    UploadMatrix(weights, up, sdn, wdn.data(), "shexp down");
    up.Run();
    const int64_t Tmax = 32;
    BufferView logits = weights.Allocate(Tmax * E * 4, "logits"),
               ids = weights.Allocate(Tmax * k * 4, "ids"),
               wts = weights.Allocate(Tmax * k * 4, "w"),
               grp = weights.Allocate(MoeGroupLayoutFor(Tmax, k, E).words * 4, "group"),
               f = weights.Allocate(Tmax * D * 4, "f"),
               fq = weights.Allocate(Tmax * ActQ8RowWords(type, D) * 4, "fq"),
               h = weights.Allocate(Tmax * k * F * 4, "h"),
               hq = weights.Allocate(Tmax * k * ActQ8RowWords(type, F) * 4, "hq"),
               hs = weights.Allocate(Tmax * F * 4, "hs"),
               hsq = weights.Allocate(Tmax * ActQ8RowWords(type, F) * 4, "hsq"),
               down = weights.Allocate(Tmax * k * D * 4, "down"),
               sh = weights.Allocate(Tmax * D * 4, "sh"), sgw = weights.Allocate(D * 4, "sgw"),
               y = weights.Allocate(Tmax * D * 4, "y");
    std::mt19937 rng(3);
    for (int64_t T : {1, 2, 4, 8, 16, 32}) {
      for (bool clustered : {false, true}) {
        // Logits: random (distinct experts ~ E (1 - (1 - k/E)^T)) or clustered (tokens share
        // their experts: every token picks among the same 2k).
        std::vector<float> l(T * E);
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (int64_t t = 0; t < T; ++t) {
          for (int e = 0; e < E; ++e) {
            l[t * E + e] = clustered ? (e < 2 * k ? 5.0f + u(rng) : u(rng)) : 4.0f * u(rng);
          }
        }
        WriteBuffer(dev_, logits, l.data(), l.size() * 4);
        std::vector<int> used(E, 0);
        for (int64_t t = 0; t < T; ++t) {  // host routing, for the byte count only
          std::vector<int> order(E);
          std::iota(order.begin(), order.end(), 0);
          std::partial_sort(order.begin(), order.begin() + k, order.end(),
                            [&](int a, int b) { return l[t * E + a] > l[t * E + b]; });
          for (int j = 0; j < k; ++j) used[order[j]] = 1;
        }
        const int distinct = std::accumulate(used.begin(), used.end(), 0);
        const uint64_t bytes = (distinct + 1) * (gu.expert_bytes() + dn.expert_bytes());
        bool int8 = false;
        std::string how;
        if (o_.moe_stages) {
          const int64_t ldq = ActQ8RowWords(type, D), ldhq = ActQ8RowWords(type, F);
          auto t_route = Time([&](CommandList& cl) { MoeRoute(cl, logits, E, T, E, k, ids, wts); });
          auto t_group = Time([&](CommandList& cl) { MoeGroup(cl, ids, T, k, E, grp); });
          auto t_gu = Time([&](CommandList& cl) {
            MoeGateUpArgs g{&gu, f, fq, D, ldq, T, k, grp, false, h, F};
            MoeGateUp(cl, g);
          });
          auto t_dn = Time([&](CommandList& cl) {
            MoeDownArgs d{&dn, h, hq, F, ldhq, T, k, grp, false, down, D};
            MoeDown(cl, d);
          });
          Add({{"name", "moe_stages"},
               {"rows", T},
               {"routing", clustered ? "clustered" : "random"},
               {"route_ms", t_route},
               {"group_ms", t_group},
               {"gate_up_ms", t_gu},
               {"down_ms", t_dn}});
        }
        const double ms = Time(
            [&](CommandList& cl) {
              int8 = cl.UsesInt8(type);
              MoeRoute(cl, logits, E, T, E, k, ids, wts);
              MoeGroup(cl, ids, T, k, E, grp);
              const int64_t ldq = ActQ8RowWords(type, D), ldhq = ActQ8RowWords(type, F);
              if (int8) QuantizeActivations(cl, type, f, D, T, D, fq, ldq);
              MoeGateUpArgs g{&gu, f, fq, D, ldq, T, k, grp, false, h, F};
              MoeGateUp(cl, g);
              MoeGateUpArgs gs{&sgu, f, fq, D, ldq, T, k, {}, true, hs, F};
              MoeGateUp(cl, gs);
              if (int8) {
                QuantizeActivations(cl, type, h, F, T * k, F, hq, ldhq);
                QuantizeActivations(cl, type, hs, F, T, F, hsq, ldhq);
              }
              MoeDownArgs d{&dn, h, hq, F, ldhq, T, k, grp, false, down, D};
              MoeDown(cl, d);
              MoeDownArgs ds{&sdn, hs, hsq, F, ldhq, T, k, {}, true, sh, D};
              MoeDown(cl, ds);
              MoeCombineArgs c{down, D, wts, k, sh, D, sgw, f, D, y, D, T, D, true};
              MoeCombine(cl, c);
            },
            &how);
        Add({{"name", "moe_block"},
             {"rows", T},
             {"routing", clustered ? "clustered" : "random"},
             {"experts", E},
             {"n_embd", D},
             {"type", TypeName(type)},
             {"path", int8 ? "int8" : "float"},
             {"distinct_experts", distinct},
             {"expert_bytes", bytes},
             {"ms", ms},
             {"gbps", bytes / ms * 1e-6},
             {"timing", how}});
      }
    }
  }

  void Gdn() {
    const int n_k = o_.small ? 4 : 16, n_v = o_.small ? 8 : 32;
    const int64_t dk = 128, C = 2 * n_k * dk + n_v * dk;
    const uint64_t state_bytes = static_cast<uint64_t>(n_v) * dk * dk * 4;
    MemoryPool mem(dev_, MemoryKind::kDevice);
    for (int64_t T : {1, 32}) {
      BufferView qkv = mem.Allocate(T * C * 4, "qkv"), conv = mem.Allocate(T * C * 4, "conv"),
                 w = mem.Allocate(C * 4 * 4, "w"), cs = mem.Allocate(3 * C * 4, "conv state"),
                 g = mem.Allocate(T * n_v * 4, "g"), beta = mem.Allocate(T * n_v * 4, "beta"),
                 s = mem.Allocate(state_bytes, "state"), o = mem.Allocate(T * n_v * dk * 4, "o");
      WriteBuffer(dev_, g, std::vector<float>(T * n_v, -0.1f).data(), T * n_v * 4);
      std::string how;
      const double ms = Time(
          [&](CommandList& cl) {
            Conv1dArgs c;
            c.x = qkv;
            c.ldx = C;
            c.T = T;
            c.C = C;
            c.K = 4;
            c.w = w;
            c.state_in = c.state_out = cs;
            c.y = conv;
            c.ldy = C;
            c.head_dim = dk;
            c.n_l2_heads = 2 * n_k;
            CausalConv1dSiluL2(cl, c);
            GdnArgs a;
            a.T = DynInt::Const(static_cast<int32_t>(T));
            a.max_T = T;
            a.n_k_heads = n_k;
            a.n_v_heads = n_v;
            a.dk = a.dv = dk;
            a.q = conv;
            a.k = conv.Sub(n_k * dk * 4, conv.size - n_k * dk * 4);
            a.v = conv.Sub(2 * n_k * dk * 4, conv.size - 2 * n_k * dk * 4);
            a.ldq = a.ldk = a.ldv = C;
            a.g = g;
            a.beta = beta;
            a.ldg = n_v;
            a.state_in = a.state_out = s;
            a.out = o;
            a.ldo = n_v * dk;
            GatedDeltaRule(cl, a);
          },
          &how);
      Add({{"name", "gdn_conv_and_recurrence"},
           {"tokens", T},
           {"v_heads", n_v},
           {"state_bytes", state_bytes},
           {"ms", ms},
           {"state_gbps", 2.0 * state_bytes / ms * 1e-6},
           {"timing", how}});
    }
  }

  void Attention() {
    const int n_head = 16, n_kv = 2;
    const int64_t D = 256, row = n_kv * D;
    const std::vector<int64_t> ctxs =
        o_.small ? std::vector<int64_t>{512, 4096} : std::vector<int64_t>{4096, 32768, 131072};
    for (int64_t ctx : ctxs) {
      const uint64_t cache = static_cast<uint64_t>(ctx) * row * 2;
      if (cache + dev_.alignment() > dev_.max_binding_bytes()) {
        Add({{"name", "attention_decode"},
             {"context", ctx},
             {"skipped", "the KV cache of one layer exceeds one binding on this device"}});
        continue;
      }
      MemoryPool mem(dev_, MemoryKind::kDevice);
      const int splits = AttentionSplitsFor(ctx);
      BufferView q = mem.Allocate(2 * n_head * D * 4, "q"), kc = mem.Allocate(cache, "k"),
                 vc = mem.Allocate(cache, "v"), out = mem.Allocate(n_head * D * 4, "out"),
                 scratch = mem.Allocate(AttentionScratchFloats(1, n_head, splits, D) * 4, "s");
      std::string how;
      const double ms = Time(
          [&](CommandList& cl) {
            AttentionArgs a;
            a.q = q;
            a.ldq = 2 * n_head * D;
            a.q_hs = 2 * D;
            a.k_cache = kc;
            a.v_cache = vc;
            a.kv_row = row;
            a.n_ctx = ctx;
            a.T = 1;
            a.n_past = DynInt::Const(static_cast<int32_t>(ctx - 1));
            a.n_head = n_head;
            a.n_head_kv = n_kv;
            a.head_dim = D;
            a.gate = q.Sub(D * 4, q.size - D * 4);
            a.ld_gate = 2 * n_head * D;
            a.gate_hs = 2 * D;
            a.out = out;
            a.ldo = n_head * D;
            a.out_hs = D;
            a.n_splits = splits;
            a.scratch = scratch;
            vulkan::Attention(cl, a);
          },
          &how);
      Add({{"name", "attention_decode"},
           {"context", ctx},
           {"splits", splits},
           {"kv_bytes", 2 * cache},
           {"ms", ms},
           {"gbps", 2.0 * cache / ms * 1e-6},
           {"timing", how}});
    }
  }

 private:
  Device& dev_;
  Options o_;
  MemoryPool pool_, host_;
  BufferView params_;
  OpConfig config_;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  json results_ = json::array();
};

int Main(int argc, char** argv) {
  CLI::App app{"crossword-vk-bench: Vulkan backend micro-benchmarks (JSON)"};
  Options o;
  bool list = false;
  std::string out_path;
  app.add_flag("--list-devices", list, "list the Vulkan devices and exit");
  app.add_option("--device", o.device, "device index (default: automatic; CPU devices allowed)");
  app.add_flag("--small", o.small, "small shapes (lavapipe dry runs)");
  app.add_option("--reps", o.reps, "timed runs per measurement (median reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--path", o.path, "mat-vec path: auto, int8 or float")
      ->check(CLI::IsMember({"auto", "int8", "float"}));
  app.add_option("--only", o.only,
                 "comma list of groups: read,dispatch,matvec,moe,gdn,attention (default all)");
  app.add_flag("--validation", o.validation, "run under the Khronos validation layer");
  app.add_flag("--moe-stages", o.moe_stages, "also time the MoE stages one by one");
  app.add_option("--json", out_path, "write the JSON here instead of stdout");
  CLI11_PARSE(app, argc, argv);

  if (list) {
    std::string why;
    const std::vector<DeviceInfo> devs = ListDevices(&why);
    if (devs.empty()) std::printf("no Vulkan device: %s\n", why.c_str());
    for (const DeviceInfo& d : devs) std::printf("%s\n", DescribeDevice(d).c_str());
    return 0;
  }
  DeviceOptions dopt;
  dopt.index = o.device;
  dopt.allow_cpu = true;
  dopt.validation = o.validation;
  std::unique_ptr<Device> dev = Device::Open(dopt);
  Bench b(*dev, o);
  const auto t0 = std::chrono::steady_clock::now();
  if (b.Want("read")) b.ReadBandwidth();
  if (b.Want("dispatch")) b.DispatchOverhead();
  if (b.Want("matvec")) b.MatVec();
  if (b.Want("moe")) b.Moe();
  if (b.Want("gdn")) b.Gdn();
  if (b.Want("attention")) b.Attention();
  const DeviceInfo& d = dev->info();
  json doc = {
      {"tool", "crossword-vk-bench"},
      {"device",
       {{"name", d.name},
        {"type", std::string(DeviceTypeName(d.type))},
        {"driver", d.driver_name + " " + d.driver_info},
        {"subgroup_size", d.subgroup_size},
        {"shared_memory_bytes", d.max_shared_bytes},
        {"max_binding_bytes", dev->max_binding_bytes()},
        {"int8_dot", d.int8_dot},
        {"int8_dot_accelerated", d.int8_dot_accelerated},
        {"fp16", d.fp16}}},
      {"options", {{"small", o.small}, {"reps", o.reps}, {"path", o.path}}},
      {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
      {"results", b.results()}};
  bench::WriteJson(doc, out_path);
  return 0;
}

}  // namespace
}  // namespace crossword::vulkan

int main(int argc, char** argv) {
  return crossword::bench::RunTool("crossword-vk-bench", crossword::vulkan::Main, argc, argv);
}
