#include "sim/report/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace stepcast {

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn,
                  const Progress& progress) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::size_t done = 0;
  std::size_t failed_at = n;
  std::exception_ptr failure;
  std::mutex mu;
  auto worker = [&]() {
    while (!stop) {
      const std::size_t i = next++;
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < failed_at) {
          failed_at = i;
          failure = std::current_exception();
        }
        stop = true;
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (progress) progress(done, n);
    }
  };
  std::vector<std::thread> pool;
  const int extra =
      static_cast<int>(std::min<std::size_t>(n, static_cast<std::size_t>(std::max(1, threads)))) -
      1;
  for (int t = 0; t < extra; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace stepcast
