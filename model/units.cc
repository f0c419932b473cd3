#include "model/units.h"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace stepcast {

namespace {

struct UnitDef {
  std::string_view text;
  double factor;
};

// Each dimension's accepted unit spellings with their factor to the SI base unit.
const std::vector<UnitDef>& units_for(Dimension d) {
  static const std::vector<UnitDef> bytes = {
      {"B", 1.0},      {"KB", 1e3},        {"MB", 1e6},   {"GB", 1e9},           {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", kGiB}, {"TiB", kGiB * 1024.0}};
  static const std::vector<UnitDef> bandwidth = {
      {"B/s", 1.0},     {"KB/s", 1e3},      {"MB/s", 1e6},      {"GB/s", 1e9},    {"TB/s", 1e12},
      {"b/s", 0.125},   {"Kb/s", 125.0},    {"Mb/s", 1.25e5},   {"Gb/s", 1.25e8}, {"Tb/s", 1.25e11},
      {"bit/s", 0.125}, {"Gbit/s", 1.25e8}, {"Tbit/s", 1.25e11}};
  static const std::vector<UnitDef> flops = {
      {"FLOP/s", 1.0}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}};
  static const std::vector<UnitDef> time = {
      {"ns", 1e-9}, {"us", 1e-6}, {"\xC2\xB5s", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  switch (d) {
    case Dimension::kBytes: return bytes;
    case Dimension::kBandwidth: return bandwidth;
    case Dimension::kFlopRate: return flops;
    case Dimension::kTime: return time;
  }
  return bytes;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

QuantityRange quantity_range(Dimension d) {
  switch (d) {
    case Dimension::kBytes: return {1.0, kGiB * 1024.0 * 1024.0, "1 B", "1024 TiB"};
    case Dimension::kBandwidth: return {1e6, 1e18, "1 MB/s", "1000000 TB/s"};
    case Dimension::kFlopRate: return {1e9, 1e18, "1 GFLOP/s", "1000 PFLOP/s"};
    case Dimension::kTime: return {0.0, 1.0, "0 s", "1 s"};
  }
  return {0.0, 0.0, "", ""};
}

const char* dimension_name(Dimension d) {
  switch (d) {
    case Dimension::kBytes: return "a size with a unit (e.g. \"80 GiB\", \"40 MB\")";
    case Dimension::kBandwidth: return "a bandwidth with a unit (e.g. \"450 GB/s\", \"400 Gb/s\")";
    case Dimension::kFlopRate: return "a compute rate with a unit (e.g. \"989.4 TFLOP/s\")";
    case Dimension::kTime: return "a time with a unit (e.g. \"2 us\", \"1.5 ms\")";
  }
  return "a quantity";
}

double parse_quantity(std::string_view text, Dimension dim) {
  std::string_view s = trim(text);
  // Number: digits, '.', exponent. std::from_chars for doubles (GCC 11+).
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) {
    throw std::invalid_argument(
        fmt::format("expected {}, got \"{}\"", dimension_name(dim), std::string(text)));
  }
  std::string_view unit = trim(std::string_view(ptr, static_cast<size_t>(end - ptr)));
  if (unit.empty()) {
    throw std::invalid_argument(fmt::format("expected {}, got the bare number \"{}\"",
                                            dimension_name(dim), std::string(text)));
  }
  if (!std::isfinite(value) || value < 0) {
    throw std::invalid_argument(
        fmt::format("expected a non-negative finite value, got \"{}\"", std::string(text)));
  }
  for (const auto& u : units_for(dim)) {
    if (u.text != unit) continue;
    const double si = value * u.factor;
    const QuantityRange r = quantity_range(dim);
    if (si != 0 && !(si >= r.min && si <= r.max)) {
      throw std::invalid_argument(fmt::format("expected 0 or a value between {} and {}, got \"{}\"",
                                              r.min_text, r.max_text, std::string(text)));
    }
    return si;
  }
  std::string known;
  for (const auto& u : units_for(dim)) {
    if (!known.empty()) known += ", ";
    known += u.text;
  }
  throw std::invalid_argument(fmt::format("expected {}: unknown unit \"{}\" (known: {})",
                                          dimension_name(dim), std::string(unit), known));
}

TimeNs to_ns(double seconds) {
  if (!(seconds > 0)) return 0;
  return static_cast<TimeNs>(std::llround(seconds * kNsPerS));
}

std::string format_time(double seconds) {
  double a = std::fabs(seconds);
  if (a >= 1.0) return fmt::format("{:.3f} s", seconds);
  if (a >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  if (a >= 1e-6) return fmt::format("{:.1f} us", seconds * 1e6);
  return fmt::format("{:.0f} ns", seconds * 1e9);
}

std::string format_bytes(double bytes) {
  double a = std::fabs(bytes);
  if (a >= kGiB) return fmt::format("{:.2f} GiB", bytes / kGiB);
  if (a >= 1048576.0) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  if (a >= 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

std::string format_bandwidth(double bytes_per_s) {
  if (bytes_per_s >= 1e12) return fmt::format("{:.2f} TB/s", bytes_per_s / 1e12);
  return fmt::format("{:.1f} GB/s", bytes_per_s / 1e9);
}

}  // namespace stepcast
