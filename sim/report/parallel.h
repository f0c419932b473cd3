// Runs independent predictions on worker threads (search, validate --cases, regress):
// fn(i) for every i in [0, n) on `threads` threads, the calling thread included. Indices are
// handed out in increasing order; after a call throws, no new index is handed out and, once
// every thread stopped, the exception of the lowest failing index is rethrown — the one a
// serial loop would have thrown. progress(done, n) is called under a lock.
#pragma once

#include <cstddef>
#include <functional>

#include "sim/report/report.h"

namespace stepcast {

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn,
                  const Progress& progress = {});

}  // namespace stepcast
