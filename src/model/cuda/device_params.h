// DeviceParams lives in nn/cuda/device_params.h (the optimizers' device forms use it too); this header is
// kept so that existing includes keep working.
#pragma once

#include "nn/cuda/device_params.h"
