// Converter from a Hugging Face `tokenizer.json` (byte-level BPE) to a GGUF vocabulary, following
// the published formats: model.vocab / model.merges / added_tokens of tokenizer.json, and the
// token types llama.cpp's converter assigns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/vocabulary.h"

namespace crossword::tokenizer {

struct HfImportOptions {
  /// Pad the vocabulary with "[PAD<id>]" UNUSED entries up to this many ids (models whose
  /// embedding has more rows than the tokenizer has tokens). 0: no padding beyond the largest id.
  int64_t pad_to = 0;
};

/// Builds a Vocabulary from the text of a tokenizer.json and, optionally (empty view: none), of
/// the tokenizer_config.json beside it (eos/pad/bos token, add_bos_token, chat_template).
///
/// Accepted tokenizer.json shape (what Qwen2/Qwen3/Qwen3.5 publish): model BPE without
/// byte_fallback, dropout, ignore_merges or subword affixes; pre_tokenizer Sequence[Split(regex,
/// Isolated), ByteLevel(use_regex=false)] whose regex is one of the supported pre-tokenizers (this
/// picks `tokenizer.ggml.pre`); the normalizer that pre-tokenizer implies (NFC for qwen2/qwen35);
/// ByteLevel decoder; added tokens without lstrip/rstrip/single_word. Merges may be "a b" strings
/// or [a, b] pairs. Ids missing from both vocab and added tokens become "[PAD<id>]" UNUSED.
/// Token types: vocab entries NORMAL; added tokens CONTROL when `special` or when they look like
/// `<|...|>`, else USER_DEFINED (llama.cpp's rule).
/// Throws crossword::Error naming the JSON field and the offending value.
Vocabulary VocabularyFromHfJson(std::string_view tokenizer_json, std::string_view config_json,
                                const HfImportOptions& options = {});

/// Reads the files and calls VocabularyFromHfJson. `config_path` may be empty.
Vocabulary VocabularyFromHfFiles(const std::string& tokenizer_path, const std::string& config_path,
                                 const HfImportOptions& options = {});

/// Writes a vocabulary-only GGUF (no tensors): general.architecture = `architecture`,
/// general.name, and the tokenizer keys (WriteVocabulary). Writes to a temporary name and renames,
/// so a failed write never leaves a truncated file at `path`.
void WriteVocabularyGguf(const Vocabulary& vocab, const std::string& path,
                         std::string_view architecture, std::string_view name);

}  // namespace crossword::tokenizer
