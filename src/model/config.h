// ModelConfig lives in core/model_config.h (nn builds layers from it); this header is kept so that
// existing includes keep working.
#pragma once

#include "core/model_config.h"
