// A recipe's demands on the number of tokens in a micro-batch, checked on the run config before training
// (otherwise the first weight-gradient quantizer would refuse the shape mid-step).
#pragma once

#include "recipe/recipe.h"

namespace fp4 {

// Block128 outer scales on the weight-gradient operands (Q5 dY^T, Q6 X^T) group 128 consecutive tokens,
// so every rank's micro-batch must hold a multiple of 128 tokens: rank r of `world` gets
// ceil((batch - r) / world) rows of `seq` tokens. Throws fp4::Error naming data.batch / data.seq / the
// rank count and the operand otherwise.
void check_micro_batch_tokens(const Recipe& recipe, int batch, int seq, int world);

}  // namespace fp4
