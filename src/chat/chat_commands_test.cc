// `crossword template` logic: the prompt rendered from a GGUF's tokenizer.chat_template (and its
// bos/eos tokens) for a messages file, a tools file and --no-think equals a direct render.
#include "chat/chat_commands.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "chat/template.h"
#include "gguf/gguf.h"

namespace crossword::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string ReadAsset() {
  std::ifstream in(std::string(CROSSWORD_SOURCE_DIR) + "/assets/chat_template.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TemplateCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "chat_cmd_" + std::to_string(::getpid());
    ASSERT_EQ(std::system(("mkdir -p " + dir_).c_str()), 0);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string WriteModel(bool with_template) {
    std::string path = dir_ + (with_template ? "/m.gguf" : "/bare.gguf");
    gguf::Writer w(path);
    w.AddKeyValue("general.architecture", gguf::Value::String("clover_moe"));
    w.AddKeyValue("tokenizer.ggml.tokens",
                  gguf::Value::Strings({"a", "<|endoftext|>", "<|im_end|>"}));
    w.AddKeyValue("tokenizer.ggml.eos_token_id", gguf::Value::Uint32(2));
    if (with_template) {
      // Our template plus a line that shows the eos token, to check it is passed through.
      w.AddKeyValue("tokenizer.chat_template",
                    gguf::Value::String(ReadAsset() + "[{{ eos_token }}]"));
    }
    w.Finish();
    return path;
  }
  std::string dir_;
};

TEST_F(TemplateCommandTest, RendersTheModelTemplate) {
  Json messages = Json::parse(R"([{"role":"user","content":"Weather in Oslo?"}])");
  Json tools = Json::parse(R"([{"type":"function","function":{"name":"w","parameters":{}}}])");
  TemplateCommandOptions o;
  o.model_path = WriteModel(true);
  o.messages_path = Write("messages.json", messages.dump());
  o.tools_path = Write("tools.json", tools.dump());
  o.no_think = true;
  std::string expected = Template::Parse(ReadAsset() + "[{{ eos_token }}]")
                             .Render(MakeChatContext(messages, tools, true, "", "<|im_end|>",
                                                     {{"enable_thinking", false}}));
  EXPECT_EQ(RenderTemplateCommand(o), expected);
  EXPECT_NE(expected.find("<tools>\n{\"type\": \"function\""), std::string::npos);
  EXPECT_NE(expected.find("<think>\n\n</think>\n\n[<|im_end|>]"), std::string::npos) << expected;
}

TEST_F(TemplateCommandTest, AcceptsAChatRequestObject) {
  Json request = Json::parse(R"({"model":"x","messages":[{"role":"user","content":"Hi"}],
                                 "chat_template_kwargs":{"enable_thinking":false}})");
  TemplateCommandOptions o;
  o.template_path = Write("t.jinja", ReadAsset());
  o.messages_path = Write("request.json", request.dump());
  EXPECT_EQ(RenderTemplateCommand(o),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_F(TemplateCommandTest, ClearErrors) {
  TemplateCommandOptions o;
  o.model_path = WriteModel(false);
  o.messages_path = Write("m.json", "[]");
  EXPECT_THROW(RenderTemplateCommand(o), crossword::Error);  // no tokenizer.chat_template
  o.model_path.clear();
  o.template_path = Write("t.jinja", ReadAsset());
  o.messages_path = Write("bad.json", "{not json");
  EXPECT_THROW(RenderTemplateCommand(o), crossword::Error);
  o.messages_path = Write("empty.json", "[]");
  EXPECT_THROW(RenderTemplateCommand(o), TemplateException);  // the template's own check
}

TEST_F(TemplateCommandTest, ToolCallArgumentsAsJsonTextRenderLikeObjects) {
  // OpenAI sends arguments as JSON text; the server parses them before rendering, so must this.
  const std::string head = R"({"messages":[{"role":"user","content":"Weather?"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
       "function":{"name":"w","arguments":)";
  const std::string tail = R"(}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]})";
  TemplateCommandOptions o;
  o.template_path = Write("t.jinja", ReadAsset());
  o.messages_path = Write("obj.json", head + R"({"city": "Oslo", "days": 2})" + tail);
  const std::string as_object = RenderTemplateCommand(o);
  o.messages_path = Write("str.json", head + R"("{\"city\": \"Oslo\", \"days\": 2}")" + tail);
  EXPECT_EQ(RenderTemplateCommand(o), as_object);
  EXPECT_NE(as_object.find("Oslo"), std::string::npos) << as_object;
  o.messages_path = Write("bad.json", head + R"("{\"city\": ")" + tail);
  try {
    RenderTemplateCommand(o);
    ADD_FAILURE() << "bad JSON text in arguments must be an error";
  } catch (const crossword::Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].tool_calls[0].function.arguments"),
              std::string::npos)
        << e.what();
  }
  std::string deep(100000, '[');
  o.messages_path = Write("deep.json", "[" + deep + "]");
  EXPECT_THROW(RenderTemplateCommand(o), crossword::Error);  // the depth gate, no stack overflow
}

}  // namespace
}  // namespace crossword::chat
