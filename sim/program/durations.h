// Task durations: what the cost models produce and the engine consumes, per simulated rank
// and task (plain data beside the Program).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "model/units.h"

namespace stepcast {

// Durations of every task, per simulated rank (same indexing as Program::ranks[r].tasks).
// Ranks may share one row (task_durations shares the rows of ranks that cost the same, as
// program.h's shared task lists do); writing through the non-const operator[] copies a
// shared row first, so rows behave as values.
class Durations {
 public:
  using Row = std::vector<TimeNs>;
  Durations() = default;
  explicit Durations(std::size_t nranks) : rows_(nranks) {}
  std::size_t size() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }
  const Row& operator[](std::size_t r) const { return rows_[r] ? *rows_[r] : empty_row(); }
  Row& operator[](std::size_t r) {
    auto& p = rows_[r];
    if (!p)
      p = std::make_shared<Row>();
    else if (p.use_count() > 1)
      p = std::make_shared<Row>(*p);
    return *p;
  }
  void emplace_back() { rows_.emplace_back(); }
  void push_back(Row row) { rows_.push_back(std::make_shared<Row>(std::move(row))); }
  // Rank r's row becomes rank `from`'s (shared, not copied).
  void share_row(std::size_t r, std::size_t from) { rows_[r] = rows_[from]; }

 private:
  static const Row& empty_row() {
    static const Row e;
    return e;
  }
  std::vector<std::shared_ptr<Row>> rows_;
};

}  // namespace stepcast
