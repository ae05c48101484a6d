/* Oracle driver around the ggml reference (de)quantizers shipped (as source) inside the npm
 * package node-llama-cpp. Built at test time by tests/oracles/build_ggml_quants_driver.sh; never
 * part of crossword itself.
 * Usage: ggml_quants_driver quantize|dequantize TYPE N < input > output
 *   quantize:   reads N float32 values, writes the blocks of quantize_row_TYPE_ref.
 *   dequantize: reads the blocks of N elements, writes N float32 values (dequantize_row_TYPE). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-common.h"
#include "ggml-quants.h"

/* ggml-quants.c references these from ggml.c on paths this driver never takes. */
void ggml_abort(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ggml_abort %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void)type; (void)ne; abort(); }
const char* ggml_type_name(enum ggml_type type) { (void)type; return "?"; }
size_t ggml_type_size(enum ggml_type type) { (void)type; abort(); }

typedef void (*quant_fn)(const float*, void*, int64_t);
typedef void (*dequant_fn)(const void*, float*, int64_t);

struct entry {
  const char* name;
  int block_elems;
  size_t block_bytes;
  quant_fn quant;
  dequant_fn dequant;
};

#define Q(name, qk, blk) \
  { #name, qk, sizeof(blk), (quant_fn)quantize_row_##name##_ref, (dequant_fn)dequantize_row_##name }
#define D(name, qk, blk) { #name, qk, sizeof(blk), NULL, (dequant_fn)dequantize_row_##name }

static const struct entry kEntries[] = {
    Q(q4_0, QK4_0, block_q4_0), Q(q4_1, QK4_1, block_q4_1), Q(q5_0, QK5_0, block_q5_0),
    Q(q5_1, QK5_1, block_q5_1), Q(q8_0, QK8_0, block_q8_0), Q(q4_K, QK_K, block_q4_K),
    Q(q6_K, QK_K, block_q6_K),  Q(q8_K, QK_K, block_q8_K),  D(q2_K, QK_K, block_q2_K),
    D(q3_K, QK_K, block_q3_K),  Q(q5_K, QK_K, block_q5_K),
    {"q8_1", QK8_1, sizeof(block_q8_1), (quant_fn)quantize_row_q8_1_ref, NULL},
};

static void read_all(void* dst, size_t n) {
  if (fread(dst, 1, n, stdin) != n) {
    fprintf(stderr, "short input\n");
    exit(2);
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s quantize|dequantize TYPE N\n", argv[0]);
    return 2;
  }
  const long long n = atoll(argv[3]);
  for (size_t i = 0; i < sizeof(kEntries) / sizeof(kEntries[0]); ++i) {
    const struct entry* e = &kEntries[i];
    if (strcmp(e->name, argv[2]) != 0) continue;
    if (n <= 0 || n % e->block_elems != 0) return 2;
    const size_t bytes = (size_t)(n / e->block_elems) * e->block_bytes;
    float* f = calloc((size_t)n, sizeof(float));
    void* q = calloc(bytes, 1);  /* zeroed: q8_K leaves bsums unset for all-zero blocks */
    if (strcmp(argv[1], "quantize") == 0 && e->quant) {
      read_all(f, (size_t)n * sizeof(float));
      e->quant(f, q, n);
      fwrite(q, 1, bytes, stdout);
    } else if (strcmp(argv[1], "dequantize") == 0 && e->dequant) {
      read_all(q, bytes);
      e->dequant(q, f, n);
      fwrite(f, sizeof(float), (size_t)n, stdout);
    } else {
      return 2;
    }
    return 0;
  }
  fprintf(stderr, "unknown type %s\n", argv[2]);
  return 2;
}
