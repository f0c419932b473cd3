// The per-rank issue loop and the Board its threads meet on (schedule.h).
#include "schedule.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

namespace stepcast::exec {

namespace {

// Thrown in the threads stopped because another one failed (never reaches the caller).
struct Stopped {};

// Arrivals per rendezvous; a thread sleeps until a rendezvous one of its ranks is in
// completes (only those threads are woken: waking every thread at every arrival costs more
// than the work on a Program of 10^5 rendezvous).
class Board {
 public:
  Board(const Plan& plan, const std::vector<int>& ranks)
      : threads_(static_cast<int>(ranks.size())),
        stuck_(ranks.size()),
        asleep_(ranks.size(), 0),
        completions_(ranks.size(), 0),
        cvs_(ranks.size()) {
    std::vector<int> slot(plan.ranks.size(), -1);
    for (size_t i = 0; i < ranks.size(); ++i)
      slot[static_cast<size_t>(ranks[i])] = static_cast<int>(i);
    const size_t n = plan.rendezvous.size();
    arrived_.assign(n, 0);
    size_.assign(n, 0);
    all_.assign(n, Arrival{});
    slots_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& members = plan.rendezvous[i].members;
      size_[i] = static_cast<int>(members.size());
      for (const RankTask& m : members) {
        const int sl = slot[static_cast<size_t>(m.rank)];
        if (sl < 0)
          ++arrived_[i];  // another process's member (header)
        else if (std::find(slots_[i].begin(), slots_[i].end(), sl) == slots_[i].end())
          slots_[i].push_back(sl);
      }
    }
  }

  std::uint64_t completions(int slot) {
    std::lock_guard<std::mutex> lk(mu_);
    return completions_[static_cast<size_t>(slot)];
  }

  void post(int inst, const Arrival& a) {
    std::lock_guard<std::mutex> lk(mu_);
    const auto i = static_cast<size_t>(inst);
    all_[i].ready = std::max(all_[i].ready, a.ready);
    all_[i].duration = std::max(all_[i].duration, a.duration);
    if (++arrived_[i] < size_[i]) return;
    for (int sl : slots_[i]) {
      const auto k = static_cast<size_t>(sl);
      ++completions_[k];
      if (asleep_[k]) {
        asleep_[k] = 0;
        --sleeping_;
        cvs_[k].notify_one();
      }
    }
  }

  bool complete(int inst, Arrival& all) {
    std::lock_guard<std::mutex> lk(mu_);
    const auto i = static_cast<size_t>(inst);
    if (arrived_[i] < size_[i]) return false;
    all = all_[i];
    return true;
  }

  // Sleeps until a rendezvous of `slot` completes after `seen`; `stuck` says what it waits for.
  void sleep(int slot, std::uint64_t seen, std::string stuck) {
    const auto k = static_cast<size_t>(slot);
    std::unique_lock<std::mutex> lk(mu_);
    if (stop_) throw_stop();
    if (completions_[k] != seen) return;
    stuck_[k] = std::move(stuck);
    asleep_[k] = 1;
    ++sleeping_;
    check_deadlock();
    cvs_[k].wait(lk, [&] { return completions_[k] != seen || stop_; });
    if (stop_) throw_stop();
  }

  void finish() {
    std::lock_guard<std::mutex> lk(mu_);
    ++finished_;
    check_deadlock();
  }

  void abort() {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    for (auto& cv : cvs_) cv.notify_one();
  }

 private:
  // Under mu_: every thread asleep or finished, some asleep: nothing can arrive any more.
  void check_deadlock() {
    if (sleeping_ == 0 || sleeping_ + finished_ < threads_) return;
    error_ =
        "the Program deadlocks: every rank waits, no rendezvous can complete; stuck stream heads:";
    for (size_t k = 0; k < stuck_.size(); ++k)
      if (asleep_[k]) error_ += stuck_[k];
    stop_ = true;
    for (auto& cv : cvs_) cv.notify_one();
  }

  [[noreturn]] void throw_stop() {
    if (!error_.empty()) throw ProgramError(error_);
    throw Stopped{};
  }

  std::mutex mu_;
  int threads_ = 0, sleeping_ = 0, finished_ = 0;
  bool stop_ = false;
  std::string error_;
  std::vector<std::string> stuck_;            // per thread slot, when asleep
  std::vector<char> asleep_;                  // per thread slot
  std::vector<std::uint64_t> completions_;    // per slot: its rendezvous completed so far
  std::vector<std::condition_variable> cvs_;  // per slot
  std::vector<int> arrived_, size_;           // per rendezvous
  std::vector<Arrival> all_;                  // per rendezvous: maxima of the arrivals
  std::vector<std::vector<int>> slots_;       // per rendezvous: its members' thread slots
};

// What rank `rank`'s stream heads wait for (the deadlock message).
std::string stuck_text(const Plan& plan, int rank, const std::vector<std::vector<int>>& lists,
                       const std::vector<size_t>& head, const std::vector<char>& issued,
                       const std::vector<char>& posted) {
  const Program& p = *plan.program;
  const auto& tasks = plan.tasks_of(rank);
  std::string out;
  for (size_t s = 0; s < lists.size(); ++s) {
    if (head[s] >= lists[s].size()) continue;
    const Task& t = tasks[static_cast<size_t>(lists[s][head[s]])];
    std::string why;
    for (int d : t.deps)
      if (!issued[static_cast<size_t>(d)])
        why += (why.empty() ? "dep " : ", dep ") + std::to_string(d) + " ('" +
               tasks[static_cast<size_t>(d)].label + "' on stream " +
               kStreams[static_cast<size_t>(tasks[static_cast<size_t>(d)].stream)] + ")";
    if (why.empty() && posted[static_cast<size_t>(t.id)])
      why = std::string("the other ") +
            (t.kind == Kind::kCollective ? "members of its group" : "side") + " (rendezvous " +
            std::to_string(plan.instance[static_cast<size_t>(rank)][static_cast<size_t>(t.id)]) +
            ")";
    out += "\n  rank " + std::to_string(rank) + " stream " + kStreams[s] + ": " +
           task_where(p, plan.ranks[static_cast<size_t>(rank)].sim, t.id) + " waits for " + why;
  }
  return out;
}

// One rank's walk over its streams (schedule.h): the decision of what to hand over when,
// whichever thread runs it.
class RankIssuer {
 public:
  RankIssuer(const Plan& plan, int rank, Board& board, Device& dev)
      : plan_(plan),
        rank_(rank),
        board_(board),
        dev_(dev),
        tasks_(plan.tasks_of(rank)),
        instance_(plan.instance[static_cast<size_t>(rank)]),
        lists_(kStreams.size()),
        head_(kStreams.size(), 0),
        issued_(tasks_.size(), 0),
        posted_(tasks_.size(), 0) {
    for (const Task& t : tasks_) lists_[static_cast<size_t>(t.stream)].push_back(t.id);
  }

  bool done() const { return done_ == tasks_.size(); }

  // Hands over everything it can, stream after stream; true when anything went.
  bool pass() {
    bool progress = false;
    for (size_t s = 0; s < lists_.size(); ++s) {
      while (head_[s] < lists_[s].size()) {
        const Task& t = tasks_[static_cast<size_t>(lists_[s][head_[s]])];
        if (!deps_issued(t)) break;
        const int inst = instance_[static_cast<size_t>(t.id)];
        if (inst < 0) {
          dev_.issue(rank_, t);
        } else {
          if (!posted_[static_cast<size_t>(t.id)]) {
            board_.post(inst, dev_.arrive(rank_, t));
            posted_[static_cast<size_t>(t.id)] = 1;
          }
          Arrival all;
          if (!board_.complete(inst, all)) break;
          dev_.issue_rendezvous(rank_, t, inst, all);
        }
        issued_[static_cast<size_t>(t.id)] = 1;
        ++head_[s];
        ++done_;
        progress = true;
      }
    }
    return progress;
  }

  std::string stuck() const { return stuck_text(plan_, rank_, lists_, head_, issued_, posted_); }

 private:
  bool deps_issued(const Task& t) const {
    return std::all_of(t.deps.begin(), t.deps.end(),
                       [&](int d) { return issued_[static_cast<size_t>(d)] != 0; });
  }

  const Plan& plan_;
  int rank_;
  Board& board_;
  Device& dev_;
  const std::vector<Task>& tasks_;
  const std::vector<int>& instance_;
  std::vector<std::vector<int>> lists_;
  std::vector<size_t> head_;
  std::vector<char> issued_, posted_;
  size_t done_ = 0;
};

void rank_loop(const Plan& plan, int rank, int slot, Board& board, Device& dev) {
  RankIssuer issuer(plan, rank, board, dev);
  while (!issuer.done()) {
    const std::uint64_t seen = board.completions(slot);
    if (!issuer.pass() && !issuer.done()) board.sleep(slot, seen, issuer.stuck());
  }
  board.finish();
}

// Threading::kOne: the ranks' issuers take turns on the calling thread.
void run_in_turn(const Plan& plan, const std::vector<int>& ranks, Device& device) {
  Board board(plan, ranks);
  std::vector<RankIssuer> issuers;
  issuers.reserve(ranks.size());
  for (int r : ranks) issuers.emplace_back(plan, r, board, device);
  for (;;) {
    bool progress = false, all_done = true;
    for (RankIssuer& is : issuers) {
      if (is.done()) continue;
      progress = is.pass() || progress;
      all_done = all_done && is.done();
    }
    if (all_done) return;
    if (progress) continue;
    std::string m =
        "the Program deadlocks: every rank waits, no rendezvous can complete; stuck stream heads:";
    for (const RankIssuer& is : issuers)
      if (!is.done()) m += is.stuck();
    throw ProgramError(m);
  }
}

}  // namespace

void run_ranks(const Plan& plan, const std::vector<int>& ranks, Device& device,
               Threading threading) {
  if (threading == Threading::kOne) return run_in_turn(plan, ranks, device);
  Board board(plan, ranks);
  std::mutex err_mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        rank_loop(plan, ranks[i], static_cast<int>(i), board, device);
      } catch (const Stopped&) {
      } catch (...) {
        {
          std::lock_guard<std::mutex> lk(err_mu);
          if (!first) first = std::current_exception();
        }
        board.abort();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace stepcast::exec
