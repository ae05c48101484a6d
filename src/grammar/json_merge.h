// JSON Schema compiler: keyword checks, $ref resolution and allOf merging (json_merge.cc).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "grammar/json_internal.h"

namespace crossword::grammar::json_internal {

/// Throws GrammarError (kUnsupported naming the keyword and `path`) for keywords outside the
/// subset, and kSyntax when `s` is not an object.
void CheckKeywords(const Json& s, const std::string& path, bool is_root);
/// Whether `s` has an assertion or applicator keyword other than those in `except`.
bool HasAssertions(const Json& s, std::initializer_list<std::string_view> except = {});
/// The subschema a local JSON-pointer `$ref` ("#", "#/a/b") names. Throws GrammarError.
const Json& ResolveRef(const Json& root, const std::string& ref, const std::string& path);
/// `schema` as one object without a top-level `$ref` or `allOf` (both merged in, `$ref`
/// siblings ignored before draft 2019-09), `const` as a one-value `enum`, `nullable` folded into
/// `type`, draft-04 boolean exclusive bounds as numbers; `false` is {"enum": []}. Keywords are
/// checked. `ref_budget` bounds the chains of references it follows.
Json Flatten(const Json& root, const Json& schema, const std::string& path, int draft,
             int ref_budget = 32);
/// One schema that accepts exactly what both accept (allOf), for the keywords of the subset.
/// Subschemas that both constrain become {"allOf": [x, y]} and are merged when visited.
Json MergeSchemas(const Json& root, const Json& a, const Json& b, const std::string& path,
                  int draft, int ref_budget = 32);
/// True when no instance can satisfy both (different types, disjoint enums, or a required
/// discriminator property with disjoint enums); false when unsure.
bool ProvablyDisjoint(const Json& a, const Json& b);

}  // namespace crossword::grammar::json_internal
