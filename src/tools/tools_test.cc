// Tests for `gguf synth | inspect | patch` through the library: layout verdicts for both layouts,
// patch output checked tensor by tensor against its input, refusals, determinism, vocabulary
// validity and the full-size plan against the official file size.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/quant.h"
#include "gguf/gguf.h"
#include "tools/clover_layout.h"
#include "tools/inspect.h"
#include "tools/patch.h"
#include "tools/synth.h"
#include "tools/synth_vocab.h"

namespace crossword::tools {
namespace {

// One folder per test process: ctest runs the tests of this file as parallel processes, and the
// cleanup below must only remove this process's files.
std::string Dir() {
  const std::string d =
      ::testing::TempDir() + "/crossword_tools_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(d);
  return d;
}

// Removes the files the tests wrote (tiny models, a few MB each) when the test ends.
class Cleanup : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (const std::string& f : FilesStartingWith("tt_")) std::remove((Dir() + "/" + f).c_str());
  }

 public:
  static std::vector<std::string> FilesStartingWith(const std::string& prefix);
};

std::string Synth(const std::string& name, const std::string& arch, const std::string& layout,
                  const std::string& type = "F32", uint64_t seed = 1, int threads = 2) {
  SynthOptions o;
  o.preset = "tiny";
  o.arch = arch;
  o.layout = layout;
  o.type = type;
  o.seed = seed;
  o.threads = threads;
  o.output = Dir() + "/tt_" + name;
  Synthesize(o, Logger::Silent());
  return o.output;
}

std::vector<char> Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> FilesStartingWith(const std::string& prefix) {
  return Cleanup::FilesStartingWith(prefix);
}

std::vector<float> Floats(const gguf::TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  DequantizeRow(t.type, t.data, v.data(), t.n_elements());
  return v;
}

// Files in the test directory whose names start with `prefix`.
std::vector<std::string> Cleanup::FilesStartingWith(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(Dir().c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name).starts_with(prefix)) out.push_back(e->d_name);
  }
  closedir(d);
  return out;
}

// A zero-element ssm_a (legal GGUF, no bytes) is examined without touching its null data.
TEST(Synth, InspectZeroElementTensor) {
  const std::string path = Dir() + "/tt_zero_elements.gguf";
  {
    gguf::Writer w(path);
    w.AddKeyValue("general.architecture", gguf::Value::String("qwen35moe"));
    const int64_t ne[1] = {0};
    w.AddTensor("blk.0.ssm_a", GgmlType::kF32, ne);
    w.WriteTensorData(std::vector<std::byte>());
    w.Finish();
  }
  const gguf::File f = gguf::File::Open(path);
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensors()[0].n_elements(), 0);
  const LayoutReport r = ExamineLayout(f);
  EXPECT_EQ(r.ssm_a_tensors, 1);
  EXPECT_EQ(r.ssm_a_raw_a_log, 0);
}

TEST(Synth, InspectVerdictsForBothLayouts) {
  for (const std::string arch : {"clover_moe", "qwen35moe"}) {
    const std::string off = Synth("verdict_off.gguf", arch, "official");
    const std::string up = Synth("verdict_up.gguf", arch, "upstream");
    const gguf::File f_off = gguf::File::Open(off);
    const gguf::File f_up = gguf::File::Open(up);
    const LayoutReport r_off = ExamineLayout(f_off);
    EXPECT_TRUE(r_off.is_official()) << r_off.verdict;
    EXPECT_TRUE(r_off.missing_shared_expert_count);
    EXPECT_EQ(r_off.diffusion_tensors, 4 * 3);  // 3 GDN layers in the tiny preset
    EXPECT_EQ(r_off.ssm_a_raw_a_log, 3);
    EXPECT_EQ(r_off.differences.size(), 3u);
    const LayoutReport r_up = ExamineLayout(f_up);
    EXPECT_TRUE(r_up.is_upstream()) << r_up.verdict;
    EXPECT_TRUE(r_up.differences.empty());

    const nlohmann::json j = InspectJson(f_off);
    EXPECT_EQ(j["layout"]["verdict"], "official (fork) layout");
    EXPECT_EQ(j["architecture"], arch);
    EXPECT_EQ(j["layers"].size(), 4u);
    EXPECT_EQ(j["layers"][0]["kind"], "gdn");
    EXPECT_EQ(j["layers"][3]["kind"], "attention");
    EXPECT_EQ(j["layers"][3]["experts"], 8);
    EXPECT_EQ(j["layers"][0]["diffusion_tensors"], 4);
    EXPECT_EQ(j["tensor_count"], f_off.tensors().size());
    uint64_t mix_bytes = 0;
    for (const auto& m : j["quant_mix"]) mix_bytes += m["bytes"].get<uint64_t>();
    uint64_t tensor_bytes = 0;
    for (const auto& t : f_off.tensors()) tensor_bytes += t.nbytes;
    EXPECT_EQ(mix_bytes, tensor_bytes);
    EXPECT_EQ(InspectJson(f_up)["layout"]["verdict"], "upstream layout");
    const std::string text = InspectText(f_off);
    EXPECT_NE(text.find("official (fork) layout"), std::string::npos);
    EXPECT_NE(text.find("blk.3.ffn_down_exps.weight"), std::string::npos);
  }
}

TEST(Synth, HyperparametersAndTensorsFollowTheArchitecture) {
  const gguf::File f = gguf::File::Open(Synth("hp.gguf", "qwen35moe", "upstream", "Q4_K_M"));
  EXPECT_EQ(f.RequireUint("qwen35moe.block_count"), 4u);
  EXPECT_EQ(f.RequireUint("qwen35moe.ssm.time_step_rank"),
            2 * f.RequireUint("qwen35moe.ssm.group_count"));
  EXPECT_EQ(f.RequireUint("qwen35moe.expert_shared_count"), 1u);
  EXPECT_EQ(*f.Find("qwen35moe.rope.dimension_sections")->Int32Array(),
            std::vector<int32_t>({3, 3, 2, 0}));
  EXPECT_EQ(f.RequireString("tokenizer.ggml.pre"), "qwen35");
  EXPECT_EQ(f.RequireBool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_FALSE(f.Find("qwen35moe.diffusion.block_size"));
  const auto tokens = *f.Find("tokenizer.ggml.tokens")->StringArray();
  EXPECT_EQ(tokens[f.RequireUint("tokenizer.ggml.mask_token_id")], "<|mask|>");
  EXPECT_EQ(tokens[f.RequireUint("tokenizer.ggml.eos_token_id")], "<|im_end|>");
  EXPECT_NE(f.RequireString("tokenizer.chat_template").find("<|im_start|>"),
            std::string_view::npos);
  // Shapes: value heads tile key heads; experts on ne[2]; ssm_a without ".weight".
  const auto* qkv = f.FindTensor("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->ne[1], 2 * 2 * 64 + 4 * 64);
  EXPECT_EQ(f.FindTensor("blk.2.ffn_up_exps.weight")->ne[2], 8);
  EXPECT_NE(f.FindTensor("blk.1.ssm_a"), nullptr);
  EXPECT_EQ(f.FindTensor("blk.3.ssm_a"), nullptr);  // layer 3 is full attention
  EXPECT_EQ(f.FindTensor("blk.3.attn_q.weight")->ne[1], 2 * 4 * 64);
  // Q4_K_M recipe: output Q6_K, GDN qkv Q5_K, experts Q4_K, norms and router F32.
  EXPECT_EQ(f.FindTensor("output.weight")->type, GgmlType::kQ6_K);
  EXPECT_EQ(qkv->type, GgmlType::kQ5_K);
  EXPECT_EQ(f.FindTensor("blk.1.ffn_up_exps.weight")->type, GgmlType::kQ4_K);
  EXPECT_EQ(f.FindTensor("blk.0.ffn_gate_inp.weight")->type, GgmlType::kF32);
  EXPECT_EQ(f.FindTensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);
  // Values: finite everywhere, norms near 1, ssm_a = -exp(A_log) in [-16, -1].
  for (const auto& t : f.tensors()) {
    for (float v : Floats(t)) ASSERT_TRUE(std::isfinite(v)) << t.name;
  }
  for (float v : Floats(*f.FindTensor("blk.0.ssm_a"))) {
    EXPECT_LE(v, -1.0f);
    EXPECT_GE(v, -16.0f);
  }
  for (float v : Floats(*f.FindTensor("output_norm.weight"))) EXPECT_NEAR(v, 1.0f, 0.2f);
}

TEST(Synth, DeterministicPerSeedAndIndependentOfThreads) {
  const auto a = Bytes(Synth("det_a.gguf", "clover_moe", "official", "Q4_0", 7, 1));
  const auto b = Bytes(Synth("det_b.gguf", "clover_moe", "official", "Q4_0", 7, 2));
  const auto c = Bytes(Synth("det_c.gguf", "clover_moe", "official", "Q4_0", 8, 2));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Patch, OutputMatchesInputExceptTheThreeFixes) {
  const std::string in_path = Synth("patch_in.gguf", "clover_moe", "official", "Q4_K_M");
  const std::string out_path = Dir() + "/tt_patch_out.gguf";
  const PatchResult r = PatchToUpstream({in_path, out_path, false}, Logger::Silent());
  EXPECT_FALSE(r.nothing_to_do);
  EXPECT_TRUE(r.key_added);
  EXPECT_EQ(r.tensors_dropped, 12);
  EXPECT_EQ(r.ssm_a_rewritten, 3);
  const gguf::File in = gguf::File::Open(in_path);
  const gguf::File out = gguf::File::Open(out_path);
  EXPECT_EQ(out.RequireUint("clover_moe.expert_shared_count"), 1u);
  EXPECT_EQ(out.metadata().size(), in.metadata().size() + 1);
  for (const auto& kv : in.metadata()) {
    const gguf::Value* v = out.Find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_TRUE(*v == kv.value) << kv.key;
  }
  size_t kept = 0;
  for (const auto& t : in.tensors()) {
    const gguf::TensorInfo* o = out.FindTensor(t.name);
    if (IsDiffusionTensor(t.name)) {
      EXPECT_EQ(o, nullptr) << t.name;
      continue;
    }
    ASSERT_NE(o, nullptr) << t.name;
    ++kept;
    EXPECT_EQ(o->ne, t.ne) << t.name;
    if (IsSsmA(t.name)) {
      ASSERT_EQ(o->type, GgmlType::kF32);
      const auto a_log = Floats(t), a = Floats(*o);
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(a[i], -std::exp(a_log[i])) << t.name << "[" << i << "]";
      continue;
    }
    EXPECT_EQ(o->type, t.type) << t.name;
    ASSERT_EQ(o->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(o->data, t.data, t.nbytes), 0) << t.name << " bytes changed";
  }
  EXPECT_EQ(kept, out.tensors().size());
  EXPECT_TRUE(ExamineLayout(out).is_upstream());
  // The synthesizer's own upstream layout is byte-identical to the patched official one.
  EXPECT_EQ(Bytes(out_path), Bytes(Synth("patch_ref.gguf", "clover_moe", "upstream", "Q4_K_M")));
}

TEST(Patch, CopiesUpstreamRefusesNonCloverAndItsOwnInput) {
  const std::string up = Synth("refuse_up.gguf", "qwen35moe", "upstream");
  const std::string out = Dir() + "/tt_refuse_out.gguf";
  std::remove(out.c_str());
  const PatchResult r = PatchToUpstream({up, out, false}, Logger::Silent());
  EXPECT_TRUE(r.nothing_to_do);
  EXPECT_EQ(Bytes(out), Bytes(up)) << "an upstream input is copied to OUT unchanged";

  const std::string other = Dir() + "/tt_refuse_llama.gguf";
  {
    gguf::Writer w(other);
    w.AddKeyValue("general.architecture", gguf::Value::String("llama"));
    w.Finish();
  }
  try {
    PatchToUpstream({other, out, false}, Logger::Silent());
    FAIL() << "a llama file must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a Clover GGUF file"), std::string::npos) << e.what();
  }
  const std::string off = Synth("refuse_off.gguf", "clover_moe", "official");
  const auto before = Bytes(off);
  EXPECT_THROW(PatchToUpstream({off, off, false}, Logger::Silent()), Error);
  EXPECT_THROW(PatchToUpstream({off, Dir() + "/./tt_refuse_off.gguf", false}, Logger::Silent()),
               Error);
  EXPECT_EQ(Bytes(off), before);
}

TEST(Patch, FailureMidWayLeavesNoFileBehind) {
  // An official-layout file whose ssm_a cannot be decoded (I32): patch fails after it has
  // started writing, and must remove its temporary file.
  const std::string bad = Dir() + "/tt_midway_in.gguf";
  {
    gguf::Writer w(bad);
    w.AddKeyValue("general.architecture", gguf::Value::String("clover_moe"));
    w.AddTensor("blk.0.attn_norm.weight", GgmlType::kF32, {64});
    w.AddTensor("blk.0.ssm_a", GgmlType::kI32, {4});
    w.AddTensor("blk.0.ssm_bd_history.bias", GgmlType::kF32, {4});
    std::vector<std::byte> zeros(64 * 4 + 16 + 16);
    w.WriteTensorData(zeros);
    w.Finish();
  }
  const std::string out = Dir() + "/tt_midway_out.gguf";
  EXPECT_THROW(PatchToUpstream({bad, out, false}, Logger::Silent()), Error);
  EXPECT_TRUE(FilesStartingWith("tt_midway_out").empty());
}

TEST(SynthVocab, MergesAreValidAndSpecialTokensSitAtTheirRealIds) {
  const SynthDims d = PresetDims("clover-35b-a3b");
  const SynthVocab v = BuildSynthVocab({d.n_bpe, d.n_vocab}, 1);
  ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), 248320);
  // Ids from qwen35moe-notes.md section 4.2.
  EXPECT_EQ(v.tokens[248044], "<|endoftext|>");
  EXPECT_EQ(v.tokens[248045], "<|im_start|>");
  EXPECT_EQ(v.tokens[248046], "<|im_end|>");
  EXPECT_EQ(v.tokens[248053], "<|vision_start|>");
  EXPECT_EQ(v.tokens[248058], "<tool_call>");
  EXPECT_EQ(v.tokens[248059], "</tool_call>");
  EXPECT_EQ(v.tokens[248066], "<tool_response>");
  EXPECT_EQ(v.tokens[248068], "<think>");
  EXPECT_EQ(v.tokens[248069], "</think>");
  EXPECT_EQ(v.tokens[v.mask_id], "<|mask|>");
  EXPECT_EQ(v.im_end_id, 248046);
  EXPECT_EQ(v.types.size(), v.tokens.size());
  std::set<std::string> seen;
  for (const auto& t : v.tokens) EXPECT_TRUE(seen.insert(t).second) << "duplicate token " << t;
  // Every merge joins two earlier tokens into the token of its rank.
  std::unordered_map<std::string, size_t> id;
  for (size_t i = 0; i < v.tokens.size(); ++i) id[v.tokens[i]] = i;
  ASSERT_EQ(v.merges.size(), static_cast<size_t>(d.n_bpe - 256));
  for (size_t r = 0; r < v.merges.size(); r += 97) {
    const std::string& m = v.merges[r];
    const size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos) << m;
    const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    ASSERT_TRUE(id.contains(a) && id.contains(b)) << m;
    EXPECT_EQ(v.tokens[256 + r], a + b) << m;
    EXPECT_LT(id[a], 256 + r);
    EXPECT_LT(id[b], 256 + r);
  }
  EXPECT_EQ(ByteLevelEncode(" the\n"), "\xc4\xa0the\xc4\x8a");  // "Ġthe" + "Ċ"
}

TEST(Synth, FullSizeQ4_0PlanIsWithinTwoPercentOfTheOfficialFile) {
  SynthOptions o;
  o.preset = "clover-35b-a3b";
  o.type = "Q4_0";
  o.layout = "official";
  o.dry_run = true;
  const SynthSummary s = Synthesize(o, Logger::Silent());
  const double official = 19586909600.0;  // clover-facts.md
  EXPECT_LT(std::fabs(static_cast<double>(s.file_size) - official) / official, 0.02) << s.file_size;
  EXPECT_NEAR(static_cast<double>(s.n_params), 34.7e9, 0.2e9);
  const auto plan = PlanSynthTensors(PresetDims("clover-35b-a3b"), o);
  int diffusion = 0;
  for (const auto& t : plan) diffusion += IsDiffusionTensor(t.name);
  EXPECT_EQ(diffusion, 120);  // 4 in each of the 30 GDN layers
}

TEST(Synth, RejectsBadOptions) {
  SynthOptions o;
  o.output = Dir() + "/tt_bad.gguf";
  o.type = "Q3_K";
  EXPECT_THROW(Synthesize(o, Logger::Silent()), Error);
  o.type = "F32";
  o.preset = "huge";
  EXPECT_THROW(Synthesize(o, Logger::Silent()), Error);
  o.preset = "tiny";
  o.layout = "sideways";
  EXPECT_THROW(Synthesize(o, Logger::Silent()), Error);
  o.layout = "";
  o.arch = "llama";
  EXPECT_THROW(Synthesize(o, Logger::Silent()), Error);
  EXPECT_TRUE(FilesStartingWith("tt_bad.gguf").empty());
}

}  // namespace
}  // namespace crossword::tools

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new crossword::tools::Cleanup);
  const int rc = RUN_ALL_TESTS();
  std::error_code ec;
  std::filesystem::remove_all(crossword::tools::Dir(), ec);
  return rc;
}
