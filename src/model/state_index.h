// StateIndex lives in core/state_index.h and the AdamW state layout in optim/adamw_state.h; this header is
// kept so that existing includes keep working.
#pragma once

#include "core/state_index.h"
#include "optim/adamw_state.h"
