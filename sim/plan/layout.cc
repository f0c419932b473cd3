#include "sim/plan/layout.h"

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast {

RankLayout::RankLayout(int tp, int cp, int dp, int pp, int ep, int etp)
    : tp_(tp), cp_(cp), dp_(dp), pp_(pp), ep_(ep), etp_(etp) {
  STEPCAST_CHECK(
      tp >= 1 && cp >= 1 && dp >= 1 && pp >= 1 && ep >= 1,
      fmt::format("sizes must be >= 1: tp {} cp {} dp {} pp {} ep {}", tp, cp, dp, pp, ep));
  STEPCAST_CHECK(etp == 1 || etp == tp, fmt::format("etp {} must be 1 or tp {}", etp, tp));
  STEPCAST_CHECK((tp * cp * dp) % (etp * ep) == 0,
                 fmt::format("etp*ep = {}*{} must divide tp*cp*dp = {}", etp, ep, tp * cp * dp));
}

int RankLayout::rank(int tp, int cp, int dp, int pp) const {
  STEPCAST_CHECK(
      tp >= 0 && tp < tp_ && cp >= 0 && cp < cp_ && dp >= 0 && dp < dp_ && pp >= 0 && pp < pp_,
      fmt::format("coordinate out of range: tp {} cp {} dp {} pp {}", tp, cp, dp, pp));
  return tp + tp_ * (cp + cp_ * (dp + dp_ * pp));
}

RankCoord RankLayout::coord(int rank) const {
  STEPCAST_CHECK(rank >= 0 && rank < world_size(),
                 fmt::format("rank {} outside world of {}", rank, world_size()));
  RankCoord c;
  c.tp = rank % tp_;
  rank /= tp_;
  c.cp = rank % cp_;
  rank /= cp_;
  c.dp = rank % dp_;
  c.pp = rank / dp_;
  const int li = c.tp + tp_ * (c.cp + cp_ * c.dp);
  c.ep = (li / etp_) % ep_;
  c.edp = li / (etp_ * ep_);
  return c;
}

std::vector<int> RankLayout::tp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  g.reserve(static_cast<size_t>(tp_));
  for (int i = 0; i < tp_; ++i) g.push_back(rank(i, c.cp, c.dp, c.pp));
  return g;
}

std::vector<int> RankLayout::cp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  g.reserve(static_cast<size_t>(cp_));
  for (int i = 0; i < cp_; ++i) g.push_back(rank(c.tp, i, c.dp, c.pp));
  return g;
}

std::vector<int> RankLayout::dp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  g.reserve(static_cast<size_t>(dp_));
  for (int i = 0; i < dp_; ++i) g.push_back(rank(c.tp, c.cp, i, c.pp));
  return g;
}

std::vector<int> RankLayout::dp_cp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  g.reserve(static_cast<size_t>(dp_ * cp_));
  for (int d = 0; d < dp_; ++d)
    for (int i = 0; i < cp_; ++i) g.push_back(rank(c.tp, i, d, c.pp));
  return g;
}

std::vector<int> RankLayout::ep_group(int r) const {
  const RankCoord c = coord(r);
  const int base = c.pp * ranks_per_stage() + r % etp_ + etp_ * ep_ * c.edp;
  std::vector<int> g;
  g.reserve(static_cast<size_t>(ep_));
  for (int i = 0; i < ep_; ++i) g.push_back(base + etp_ * i);
  return g;
}

std::vector<int> RankLayout::edp_group(int r) const {
  const RankCoord c = coord(r);
  const int base = c.pp * ranks_per_stage() + r % etp_ + etp_ * c.ep;
  std::vector<int> g;
  g.reserve(static_cast<size_t>(edp()));
  for (int e = 0; e < edp(); ++e) g.push_back(base + etp_ * ep_ * e);
  return g;
}

std::vector<int> RankLayout::pp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  g.reserve(static_cast<size_t>(pp_));
  for (int i = 0; i < pp_; ++i) g.push_back(rank(c.tp, c.cp, c.dp, i));
  return g;
}

std::vector<int> RankLayout::stage_ranks(int stage) const {
  STEPCAST_CHECK(stage >= 0 && stage < pp_, fmt::format("stage {} of {}", stage, pp_));
  std::vector<int> g;
  g.reserve(static_cast<size_t>(ranks_per_stage()));
  for (int i = 0; i < ranks_per_stage(); ++i) g.push_back(stage * ranks_per_stage() + i);
  return g;
}

}  // namespace stepcast
