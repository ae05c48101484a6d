// Jinja2 parser: tokens -> statement tree. The grammar follows jinja2/parser.py (operator
// precedence, filters/tests binding, tuples, slices, statements) so evaluation order matches.
#include <algorithm>
#include <cstdlib>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"
#include "chat/template.h"

namespace crossword::chat::jinja {
namespace {

constexpr int kMaxParseDepth = 200;

// ---------------------------------------------------------------------------------------------

class Parser {
 public:
  Parser(const SourceMap& map, std::vector<Token> tokens) : lexer_(map), t_(std::move(tokens)) {}

  Body ParseAll() {
    Body body = Subparse({});
    if (Cur().type != Tok::kEof) Fail(Cur(), "unexpected token");
    return body;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& Next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool IsOp(std::string_view op) const { return Cur().type == Tok::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().type == Tok::kName && Cur().text == n; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view n) {
    if (!IsName(n)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Tok::kData:
        return "template text";
      case Tok::kVarBegin:
        return "'{{'";
      case Tok::kVarEnd:
        return "end of print statement '}}'";
      case Tok::kBlockBegin:
        return "'{%'";
      case Tok::kBlockEnd:
        return "end of statement block '%}'";
      case Tok::kName:
        return "'" + t.text + "'";
      case Tok::kString:
        return "string literal";
      case Tok::kInt:
      case Tok::kFloat:
        return "number";
      case Tok::kOp:
        return "'" + t.text + "'";
      case Tok::kEof:
        return "end of template";
    }
    return "token";
  }

  [[noreturn]] void Fail(const Token& at, const std::string& message) const {
    lexer_.Error(at.pos, message + " (found " + Describe(at) + ")");
  }

  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Fail(Cur(), fmt::format("expected '{}'", op));
  }
  std::string ExpectName() {
    if (Cur().type != Tok::kName) Fail(Cur(), "expected a name");
    return Next().text;
  }
  void Expect(Tok type, const char* what) {
    if (Cur().type != type) Fail(Cur(), fmt::format("expected {}", what));
    Next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxParseDepth) p->Fail(p->Cur(), "template nests too deeply");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  std::unique_ptr<Expr> Node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    lexer_.Location(at.pos, &e->line, &e->column);
    return e;
  }

  int LineOf(const Token& t) const {
    int line, column;
    lexer_.Location(t.pos, &line, &column);
    return line;
  }

  // ---- statements ----

  // Parses until a block tag whose first name is in `end_names` (left as the current token).
  Body Subparse(const std::vector<std::string_view>& end_names) {
    DepthGuard guard(this);
    Body body;
    while (Cur().type != Tok::kEof) {
      const Token& tok = Cur();
      if (tok.type == Tok::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = LineOf(tok);
        s->text = tok.text;
        body.push_back(std::move(s));
        Next();
      } else if (tok.type == Tok::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->line = LineOf(tok);
        s->expr = ParseTuple(true, {});
        Expect(Tok::kVarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (tok.type == Tok::kBlockBegin) {
        Next();
        if (Cur().type == Tok::kName &&
            std::find(end_names.begin(), end_names.end(), Cur().text) != end_names.end()) {
          return body;
        }
        body.push_back(ParseStatement());
        Expect(Tok::kBlockEnd, "'%}'");
      } else {
        Fail(tok, "unexpected token");
      }
    }
    if (!end_names.empty()) {
      std::string names;
      for (auto n : end_names) names += (names.empty() ? "'" : " or '") + std::string(n) + "'";
      Fail(Cur(), "unexpected end of template; expected " + names + " to close the block");
    }
    return body;
  }

  Body ParseBlockBody(const std::vector<std::string_view>& end_names) {
    SkipOp(":");
    Expect(Tok::kBlockEnd, "'%}'");
    return Subparse(end_names);
  }

  std::unique_ptr<Stmt> ParseStatement() {
    const Token& tok = Cur();
    if (tok.type != Tok::kName) Fail(tok, "expected a statement name");
    auto s = std::make_unique<Stmt>();
    s->line = LineOf(tok);
    const std::string& kw = tok.text;
    if (kw == "if") return ParseIf(std::move(s));
    if (kw == "for") return ParseFor(std::move(s));
    if (kw == "set") return ParseSet(std::move(s));
    if (kw == "macro") return ParseMacro(std::move(s));
    if (kw == "break" || kw == "continue") {
      Next();
      s->kind = kw == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      return s;
    }
    if (kw == "print") {
      Next();
      s->kind = StmtKind::kPrint;
      s->expr = ParseTuple(true, {});
      return s;
    }
    if (kw == "filter") {
      Next();
      s->kind = StmtKind::kFilterBlock;
      s->filter = ParseFilterChain(nullptr, true);
      s->body = ParseBlockBody({"endfilter"});
      Next();
      return s;
    }
    if (kw == "with") return ParseWith(std::move(s));
    if (kw == "include" || kw == "import" || kw == "from" || kw == "extends" || kw == "block" ||
        kw == "call" || kw == "autoescape") {
      Fail(tok, fmt::format("'{}' is not supported in chat templates (the template must be "
                            "self-contained)",
                            kw));
    }
    if (kw == "do") Fail(tok, "'do' needs the jinja2.ext.do extension, which chat templates lack");
    Fail(tok, fmt::format("unknown or misplaced tag '{}'", kw));
  }

  std::unique_ptr<Stmt> ParseIf(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::kIf;
    Next();
    while (true) {
      s->conditions.push_back(ParseTuple(false, {}));
      s->bodies.push_back(ParseBlockBody({"elif", "else", "endif"}));
      std::string tag = Next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        s->else_body = ParseBlockBody({"endif"});
        Next();
      }
      break;
    }
    return s;
  }

  std::vector<std::string> ParseTargets(bool* is_tuple, std::string_view end_name) {
    std::vector<std::string> names;
    bool paren = SkipOp("(");
    while (true) {
      names.push_back(ExpectName());
      if (!SkipOp(",")) break;
      *is_tuple = true;
      if ((paren && IsOp(")")) || IsName(end_name) || IsOp("=")) break;
    }
    if (paren) {
      ExpectOp(")");
      *is_tuple = true;
    }
    return names;
  }

  std::unique_ptr<Stmt> ParseFor(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::kFor;
    Next();
    s->targets = ParseTargets(&s->target_is_tuple, "in");
    if (!SkipName("in")) Fail(Cur(), "expected 'in' in for loop");
    s->expr = ParseTuple(false, {"recursive"});
    if (SkipName("if")) s->condition = ParseExpression(true);
    if (IsName("recursive")) Fail(Cur(), "recursive for loops are not supported");
    s->body = ParseBlockBody({"endfor", "else"});
    if (Next().text == "else") {
      s->else_body = ParseBlockBody({"endfor"});
      Next();
    }
    return s;
  }

  std::unique_ptr<Stmt> ParseSet(std::unique_ptr<Stmt> s) {
    Next();
    if (Cur().type == Tok::kName && Peek().type == Tok::kOp && Peek().text == ".") {
      s->kind = StmtKind::kSet;
      s->ns_name = Next().text;
      Next();
      s->ns_attr = ExpectName();
      ExpectOp("=");
      s->expr = ParseTuple(true, {});
      return s;
    }
    s->targets = ParseTargets(&s->target_is_tuple, "");
    if (SkipOp("=")) {
      s->kind = StmtKind::kSet;
      s->expr = ParseTuple(true, {});
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (IsOp("|")) s->filter = ParseFilterChain(nullptr, false);
    s->body = ParseBlockBody({"endset"});
    Next();
    return s;
  }

  std::unique_ptr<Stmt> ParseMacro(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::kMacro;
    Next();
    s->name = ExpectName();
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!s->targets.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      s->targets.push_back(ExpectName());
      if (SkipOp("=")) {
        s->defaults.push_back(ParseExpression(true));
      } else if (!s->defaults.empty()) {
        Fail(Cur(), "non-default argument follows default argument");
      }
    }
    ExpectOp(")");
    s->body = ParseBlockBody({"endmacro"});
    Next();
    return s;
  }

  std::unique_ptr<Stmt> ParseWith(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::kWith;
    Next();
    while (Cur().type != Tok::kBlockEnd) {
      if (!s->targets.empty()) ExpectOp(",");
      s->targets.push_back(ExpectName());
      ExpectOp("=");
      s->values.push_back(ParseExpression(true));
    }
    s->body = ParseBlockBody({"endwith"});
    Next();
    return s;
  }

  // ---- expressions ----

  bool IsTupleEnd(const std::vector<std::string_view>& extra_end) const {
    if (Cur().type == Tok::kVarEnd || Cur().type == Tok::kBlockEnd || IsOp(")")) return true;
    for (auto n : extra_end) {
      if (IsName(n)) return true;
    }
    return false;
  }

  std::unique_ptr<Expr> ParseTuple(bool with_condexpr, const std::vector<std::string_view>& extra,
                                   bool explicit_parens = false) {
    const Token& start = Cur();
    std::vector<std::unique_ptr<Expr>> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) ExpectOp(",");
      if (IsTupleEnd(extra)) break;
      args.push_back(ParseExpression(with_condexpr));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) Fail(Cur(), "expected an expression");
    }
    auto t = Node(ExprKind::kTuple, start);
    t->children = std::move(args);
    return t;
  }

  std::unique_ptr<Expr> ParseExpression(bool with_condexpr) {
    DepthGuard guard(this);
    if (!with_condexpr) return ParseOr();
    const Token& start = Cur();
    auto expr = ParseOr();
    while (SkipName("if")) {
      auto test = ParseOr();
      std::unique_ptr<Expr> otherwise;
      if (SkipName("else")) otherwise = ParseExpression(true);
      auto c = Node(ExprKind::kCondExpr, start);
      c->children.push_back(std::move(expr));
      c->children.push_back(std::move(test));
      c->children.push_back(std::move(otherwise));
      expr = std::move(c);
    }
    return expr;
  }

  std::unique_ptr<Expr> Binary(ExprKind kind, const Token& at, std::unique_ptr<Expr> l,
                               std::unique_ptr<Expr> r, std::string op = "") {
    auto e = Node(kind, at);
    e->name = std::move(op);
    e->children.push_back(std::move(l));
    e->children.push_back(std::move(r));
    return e;
  }

  std::unique_ptr<Expr> ParseOr() {
    auto left = ParseAnd();
    while (IsName("or")) {
      const Token& at = Next();
      left = Binary(ExprKind::kOr, at, std::move(left), ParseAnd());
    }
    return left;
  }

  std::unique_ptr<Expr> ParseAnd() {
    auto left = ParseNot();
    while (IsName("and")) {
      const Token& at = Next();
      left = Binary(ExprKind::kAnd, at, std::move(left), ParseNot());
    }
    return left;
  }

  std::unique_ptr<Expr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      const Token& at = Next();
      auto e = Node(ExprKind::kNot, at);
      e->children.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  std::unique_ptr<Expr> ParseCompare() {
    const Token& start = Cur();
    auto first = ParseMath1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (Cur().type == Tok::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Next().text;
      } else if (SkipName("in")) {
        op = "in";
      } else if (IsName("not") && Peek().type == Tok::kName && Peek().text == "in") {
        Next();
        Next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Node(ExprKind::kCompare, start);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  std::unique_ptr<Expr> ParseMath1() {
    auto left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& at = Next();
      left = Binary(ExprKind::kBinary, at, std::move(left), ParseConcat(), at.text);
    }
    return left;
  }

  std::unique_ptr<Expr> ParseConcat() {
    const Token& start = Cur();
    auto first = ParseMath2();
    if (!IsOp("~")) return first;
    auto c = Node(ExprKind::kConcat, start);
    c->children.push_back(std::move(first));
    while (SkipOp("~")) c->children.push_back(ParseMath2());
    return c;
  }

  std::unique_ptr<Expr> ParseMath2() {
    auto left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& at = Next();
      left = Binary(ExprKind::kBinary, at, std::move(left), ParsePow(), at.text);
    }
    return left;
  }

  std::unique_ptr<Expr> ParsePow() {
    auto left = ParseUnary(true);
    while (IsOp("**")) {
      const Token& at = Next();
      left = Binary(ExprKind::kBinary, at, std::move(left), ParseUnary(true), "**");
    }
    return left;
  }

  std::unique_ptr<Expr> ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    std::unique_ptr<Expr> node;
    if (IsOp("-") || IsOp("+")) {
      const Token& at = Next();
      node = Node(at.text == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
      node->children.push_back(ParseUnary(false));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  std::unique_ptr<Expr> ParsePrimary() {
    DepthGuard guard(this);
    const Token& tok = Cur();
    if (tok.type == Tok::kName) {
      Next();
      if (tok.text == "true" || tok.text == "True" || tok.text == "false" || tok.text == "False") {
        auto e = Node(ExprKind::kLiteral, tok);
        e->value = tok.text == "true" || tok.text == "True";
        return e;
      }
      if (tok.text == "none" || tok.text == "None") {
        auto e = Node(ExprKind::kLiteral, tok);
        e->value = None{};
        return e;
      }
      auto e = Node(ExprKind::kName, tok);
      e->name = tok.text;
      return e;
    }
    if (tok.type == Tok::kString) {
      auto e = Node(ExprKind::kLiteral, tok);
      std::string text;
      while (Cur().type == Tok::kString) text += Next().text;  // adjacent literals concatenate
      e->value = std::move(text);
      return e;
    }
    if (tok.type == Tok::kInt || tok.type == Tok::kFloat) {
      auto e = Node(ExprKind::kLiteral, tok);
      e->value = Next().number;
      return e;
    }
    if (IsOp("(")) {
      Next();
      auto e = ParseTuple(true, {}, true);
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      Next();
      auto e = Node(ExprKind::kList, tok);
      while (!IsOp("]")) {
        if (!e->children.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        e->children.push_back(ParseExpression(true));
      }
      ExpectOp("]");
      return e;
    }
    if (IsOp("{")) {
      Next();
      auto e = Node(ExprKind::kDict, tok);
      while (!IsOp("}")) {
        if (!e->children.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        e->children.push_back(ParseExpression(true));
        ExpectOp(":");
        e->children.push_back(ParseExpression(true));
      }
      ExpectOp("}");
      return e;
    }
    Fail(tok, "unexpected token in expression");
  }

  std::unique_ptr<Expr> ParsePostfix(std::unique_ptr<Expr> node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::unique_ptr<Expr> ParseFilterExpr(std::unique_ptr<Expr> node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilterChain(std::move(node), false);
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::unique_ptr<Expr> ParseSubscript(std::unique_ptr<Expr> node) {
    DepthGuard guard(this);
    const Token& at = Next();
    if (at.text == ".") {
      const Token& attr = Cur();
      if (attr.type == Tok::kName) {
        Next();
        auto e = Node(ExprKind::kGetAttr, at);
        e->name = attr.text;
        e->children.push_back(std::move(node));
        return e;
      }
      if (attr.type != Tok::kInt) Fail(attr, "expected a name or number after '.'");
      auto key = Node(ExprKind::kLiteral, attr);
      key->value = Next().number;
      auto e = Node(ExprKind::kGetItem, at);
      e->children.push_back(std::move(node));
      e->children.push_back(std::move(key));
      return e;
    }
    std::vector<std::unique_ptr<Expr>> args;
    while (!IsOp("]")) {
      if (!args.empty()) ExpectOp(",");
      args.push_back(ParseSubscribed());
    }
    ExpectOp("]");
    auto e = Node(ExprKind::kGetItem, at);
    e->children.push_back(std::move(node));
    if (args.size() == 1) {
      e->children.push_back(std::move(args[0]));
    } else {
      auto t = Node(ExprKind::kTuple, at);
      t->children = std::move(args);
      e->children.push_back(std::move(t));
    }
    return e;
  }

  std::unique_ptr<Expr> ParseSubscribed() {
    const Token& start = Cur();
    std::vector<std::unique_ptr<Expr>> parts;
    if (IsOp(":")) {
      Next();
      parts.push_back(nullptr);
    } else {
      auto node = ParseExpression(true);
      if (!IsOp(":")) return node;
      Next();
      parts.push_back(std::move(node));
    }
    if (IsOp(":") || IsOp("]") || IsOp(",")) {
      parts.push_back(nullptr);
    } else {
      parts.push_back(ParseExpression(true));
    }
    if (SkipOp(":")) {
      if (IsOp("]") || IsOp(",")) {
        parts.push_back(nullptr);
      } else {
        parts.push_back(ParseExpression(true));
      }
    } else {
      parts.push_back(nullptr);
    }
    auto e = Node(ExprKind::kSlice, start);
    e->children = std::move(parts);
    return e;
  }

  // Appends `( args )` to `e` (children after the existing ones, kwargs named in keywords).
  void ParseCallArgs(Expr* e) {
    ExpectOp("(");
    bool need_comma = false;
    while (!IsOp(")")) {
      if (need_comma) {
        ExpectOp(",");
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) Fail(Cur(), "*args / **kwargs in calls are not supported");
      if (Cur().type == Tok::kName && Peek().type == Tok::kOp && Peek().text == "=") {
        e->keywords.push_back(Next().text);
        Next();
        e->children.push_back(ParseExpression(true));
      } else {
        if (!e->keywords.empty()) Fail(Cur(), "positional argument follows keyword argument");
        e->children.push_back(ParseExpression(true));
      }
      need_comma = true;
    }
    ExpectOp(")");
  }

  std::unique_ptr<Expr> ParseCall(std::unique_ptr<Expr> node) {
    DepthGuard guard(this);
    auto e = Node(ExprKind::kCall, Cur());
    e->children.push_back(std::move(node));
    ParseCallArgs(e.get());
    return e;
  }

  std::string ParseDottedName() {
    std::string name = ExpectName();
    while (SkipOp(".")) name += "." + ExpectName();
    return name;
  }

  // `| f(args) | g ...`; with start_inline the first filter has no leading pipe.
  std::unique_ptr<Expr> ParseFilterChain(std::unique_ptr<Expr> node, bool start_inline) {
    DepthGuard guard(this);
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      auto e = Node(ExprKind::kFilter, Cur());
      e->name = ParseDottedName();
      e->children.push_back(std::move(node));
      if (IsOp("(")) ParseCallArgs(e.get());
      node = std::move(e);
    }
    return node;
  }

  std::unique_ptr<Expr> ParseTest(std::unique_ptr<Expr> node) {
    DepthGuard guard(this);
    const Token& at = Next();  // 'is'
    bool negated = SkipName("not");
    auto e = Node(ExprKind::kTest, at);
    e->name = ParseDottedName();
    e->children.push_back(std::move(node));
    if (IsOp("(")) {
      ParseCallArgs(e.get());
    } else if ((Cur().type == Tok::kName || Cur().type == Tok::kString || Cur().type == Tok::kInt ||
                Cur().type == Tok::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) Fail(Cur(), "you cannot chain multiple tests with 'is'");
      e->children.push_back(ParsePostfix(ParsePrimary()));
    }
    if (!negated) return e;
    auto n = Node(ExprKind::kNot, at);
    n->children.push_back(std::move(e));
    return n;
  }

  const SourceMap& lexer_;
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body ParseTemplate(std::string_view source) {
  std::unique_ptr<SourceMap> map;
  std::vector<Token> tokens = Lex(source, &map);
  Parser parser(*map, std::move(tokens));
  return parser.ParseAll();
}

}  // namespace crossword::chat::jinja
