// Link utilisation samples of the flow mode (sim/engine/flow_network.h), reported in the
// Timeline and drawn as trace counters.
#pragma once

#include <array>

#include "model/units.h"

namespace stepcast {

// Flow mode: utilisation of each link class (bytes/s in use / capacity) from t on.
inline constexpr int kLinkClasses = 4;
inline constexpr const char* kLinkClassNames[kLinkClasses] = {"nvlink", "nic", "leaf_uplink",
                                                              "pod_uplink"};
struct LinkUtilSample {
  TimeNs t = 0;
  std::array<double, kLinkClasses> util{};
};

}  // namespace stepcast
