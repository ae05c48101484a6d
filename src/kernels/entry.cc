// Dispatching entry points of kernels.h (first version: parallel loops over the scalar twins).
#include <algorithm>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

namespace crossword::kernels {

void Attention(const AttentionArgs& args, ThreadPool&) { ref::Attention(args); }
void GatedDeltaRule(const GdnArgs& args, ThreadPool&) { ref::GatedDeltaRule(args); }

}  // namespace crossword::kernels
