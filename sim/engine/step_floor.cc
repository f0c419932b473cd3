// step_floor_ns (engine.h): a lower bound on the simulated step from the durations alone,
// the longest chain of a rank's tasks linked by dependencies and stream order.
#include <algorithm>
#include <array>
#include <vector>

#include "sim/engine/engine.h"

namespace stepcast {

TimeNs step_floor_ns(const Program& program, const Durations& durations) {
  TimeNs floor = 0;
  std::vector<TimeNs> end;
  for (size_t r = 0; r < program.ranks.size(); ++r) {
    const TaskList& tasks = program.ranks[r].tasks;
    const Durations::Row& d = durations[r];
    end.assign(tasks.size(), 0);
    std::array<TimeNs, kStreamCount> stream_end{};
    TimeNs compute = 0, last = 0;
    bool forward = false;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      const auto s = static_cast<size_t>(t.stream);
      TimeNs start = stream_end[s];
      for (int dep : t.deps) {
        if (static_cast<size_t>(dep) >= i) {
          forward = true;
          break;
        }
        start = std::max(start, end[static_cast<size_t>(dep)]);
      }
      end[i] = start + d[i];
      stream_end[s] = end[i];
      last = std::max(last, end[i]);
      if (t.stream == StreamKind::kCompute) compute += d[i];
    }
    floor = std::max(floor, forward ? compute : last);
  }
  return floor;
}

}  // namespace stepcast
