// The Communicator interface lives in core/communicator.h (engines and optimizers use it without the dist
// library); this header is kept so that existing includes keep working.
#pragma once

#include "core/communicator.h"
