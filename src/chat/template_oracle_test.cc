// Chat-template oracle test: our Jinja2 interpreter must render byte-identical output to Jinja2
// (python3-jinja2 configured as HF transformers does) on the real Qwen3 and Qwen3.5 templates,
// on our own template, and on the feature snippets. Expected outputs are produced by the CTest
// fixture tests/oracles/jinja_oracle_setup.py into CROSSWORD_CHAT_ORACLE_DIR.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "chat/template.h"

namespace crossword::chat {
namespace {

using Json = nlohmann::ordered_json;

// The fixture's output folder; CROSSWORD_CHAT_ORACLE_DIR in the environment overrides it (handy
// for running extra snippet files by hand).
std::string OracleDir() {
  const char* env = std::getenv("CROSSWORD_CHAT_ORACLE_DIR");
  return env ? env : CROSSWORD_CHAT_ORACLE_DIR;
}

Json Load(const std::string& name) {
  std::string path = OracleDir() + "/" + name;
  std::ifstream in(path);
  if (!in) ADD_FAILURE() << "missing " << path << " (run the chat_oracle_setup fixture first)";
  std::stringstream ss;
  ss << in.rdbuf();
  return in ? Json::parse(ss.str()) : Json::array();
}

std::string LoadText(const std::string& name) {
  std::ifstream in(OracleDir() + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Checks one rendering against Jinja2's result; returns true when they agree.
bool Agrees(const std::string& label, const std::string& source, const Json& context,
            const Json& expected) {
  std::string got;
  try {
    got = Template::Parse(source).Render(context);
  } catch (const TemplateException& e) {
    if (expected.contains("raised") && expected["raised"] == e.what()) return true;
    ADD_FAILURE() << label << ": raise_exception(" << e.what() << ") but Jinja2 gave "
                  << expected.dump();
    return false;
  } catch (const TemplateError& e) {
    if (expected.contains("error")) return true;
    ADD_FAILURE() << label << ": error '" << e.what() << "' but Jinja2 gave " << expected.dump();
    return false;
  }
  if (expected.contains("ok") && expected["ok"] == got) return true;
  ADD_FAILURE() << label << ": rendered\n[" << got << "]\nbut Jinja2 gave " << expected.dump();
  return false;
}

void CheckTemplate(const std::string& name) {
  std::string source = LoadText(name + ".jinja");
  ASSERT_FALSE(source.empty()) << name;
  Json cases = Load("expected_" + name + ".json");
  ASSERT_GE(cases.size(), 20u);
  size_t agree = 0, rendered = 0;
  for (const Json& c : cases) {
    if (c["expected"].contains("ok")) ++rendered;
    agree +=
        Agrees(name + " / " + c["name"].get<std::string>(), source, c["context"], c["expected"]);
  }
  EXPECT_EQ(agree, cases.size());
  // Most conversations must render (not just fail alike) for the comparison to mean something.
  EXPECT_GE(rendered, cases.size() / 2) << name;
  std::printf("[chat oracle] %s: %zu/%zu conversations identical to Jinja2 (%zu rendered)\n",
              name.c_str(), agree, cases.size(), rendered);
}

TEST(ChatTemplateOracle, OurTemplate) { CheckTemplate("crossword"); }
TEST(ChatTemplateOracle, Qwen3Template) { CheckTemplate("qwen3"); }
TEST(ChatTemplateOracle, Qwen35Template) { CheckTemplate("qwen35"); }

TEST(ChatTemplateOracle, Snippets) {
  Json snippets = Load("snippets.json");
  ASSERT_GE(snippets.size(), 50u);
  size_t agree = 0;
  for (size_t i = 0; i < snippets.size(); ++i) {
    const Json& s = snippets[i];
    std::string source = s["template"];
    agree +=
        Agrees("snippet " + std::to_string(i) + " " + source, source, s["context"], s["expected"]);
  }
  EXPECT_EQ(agree, snippets.size());
  std::printf("[chat oracle] snippets: %zu/%zu identical to Jinja2\n", agree, snippets.size());
}

}  // namespace
}  // namespace crossword::chat
