// Minimal reader for the measured CSV tables in tests/data/measured/ ('#' lines are
// comments, first other line is the header).
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast::testing {

using CsvRow = std::map<std::string, std::string>;

inline std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"')
      quoted = !quoted;
    else if (c == ',' && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r')
      cur += c;
  }
  out.push_back(cur);
  return out;
}

inline std::vector<CsvRow> read_measured_csv(const std::string& name) {
  const std::string path = std::string(STEPCAST_SOURCE_DIR) + "/tests/data/measured/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<CsvRow> rows;
  std::vector<std::string> header;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto cells = split_csv_line(line);
    if (header.empty()) {
      header = cells;
      continue;
    }
    CsvRow row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace stepcast::testing
