// Units and quantities. Simulated time is integer nanoseconds (TimeNs) everywhere, so the
// same input gives bit-identical output. Other quantities are doubles in SI base units whose
// names carry the unit (bytes, bytes_per_s, flops, flop_per_s, seconds).
//
// Quantity text is parsed strictly: a number, one space optional, and a unit of the expected
// dimension ("80 GiB", "3.35 TB/s", "450 GB/s", "400 Gb/s", "989.4 TFLOP/s", "2 us").
// Decimal prefixes are powers of 1000, binary ones (KiB, MiB, GiB, TiB) powers of 1024;
// "b" is bits, "B" bytes. A bare number, an unknown unit or a unit of another dimension is
// an error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace stepcast {

using TimeNs = std::int64_t;

inline constexpr double kNsPerS = 1e9;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

enum class Dimension { kBytes, kBandwidth, kFlopRate, kTime };

const char* dimension_name(Dimension d);  // "a size in bytes (e.g. 80 GiB)", ...

// The values a quantity of each dimension may take besides 0, in SI base units: wide enough
// for any GPU cluster and any what-if, narrow enough that every duration derived from them
// stays far inside TimeNs (a bandwidth of 1e-300 GB/s or a 1e300 us launch overhead would
// overflow simulated time; 1e300 TB/s is not even finite). Sizes: 1 B .. 1024 TiB;
// bandwidths: 1 MB/s .. 10^6 TB/s; compute rates: 1 GFLOP/s .. 1000 PFLOP/s; times: up to 1 s
// (latencies and per-kernel overheads).
struct QuantityRange {
  double min, max;
  const char* min_text;
  const char* max_text;
};
QuantityRange quantity_range(Dimension d);

// Returns the value in SI base units (bytes, bytes/s, FLOP/s, s). Throws
// std::invalid_argument with a message saying what was expected on bad text, including a
// value that is neither 0 nor inside quantity_range(dim).
double parse_quantity(std::string_view text, Dimension dim);

// Seconds (double) to integer nanoseconds, rounding to nearest; negative inputs clamp to 0.
TimeNs to_ns(double seconds);
inline double to_s(TimeNs ns) { return static_cast<double>(ns) / kNsPerS; }

// Human formatting for reports: "1.23 ms", "45.6 GiB", "370 GB/s".
std::string format_time(double seconds);
std::string format_bytes(double bytes);            // binary units
std::string format_bandwidth(double bytes_per_s);  // decimal units

}  // namespace stepcast
