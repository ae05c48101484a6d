// Highway target selection for crossword_kernels; include before any Highway header.
// AVX3_DL (VNNI) is opt-in in Highway 1.0.3; SSSE3/SSE4 are dropped to save build time
// (machines without AVX2 use the portable EMU128 target).
#pragma once

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1
#endif
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
