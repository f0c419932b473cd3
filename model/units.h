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

// Returns the value in SI base units (bytes, bytes/s, FLOP/s, s). Throws
// std::invalid_argument with a message saying what was expected on bad text.
double parse_quantity(std::string_view text, Dimension dim);

// Seconds (double) to integer nanoseconds, rounding to nearest; negative inputs clamp to 0.
TimeNs to_ns(double seconds);
inline double to_s(TimeNs ns) { return static_cast<double>(ns) / kNsPerS; }

// Human formatting for reports: "1.23 ms", "45.6 GiB", "370 GB/s".
std::string format_time(double seconds);
std::string format_bytes(double bytes);  // binary units
std::string format_bandwidth(double bytes_per_s);  // decimal units

}  // namespace stepcast
