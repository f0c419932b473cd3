// The search's and the sweep's output (explore.h): the line on the scenario's own plan, the
// bound line, the table of points, CSV and the HTML page.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/report/explore.h"

namespace stepcast {

std::string own_plan_line(const SearchOutcome& out, const Result& own) {
  if (!own.fits_memory) {
    return fmt::format("scenario's plan ({}) does not fit: peak {:.2f} GiB of {:.2f} GiB\n",
                       own.layout, own.memory_peak_gib, own.memory_capacity_gib);
  }
  const auto& t = out.fitting_step_times;
  const auto faster = std::lower_bound(t.begin(), t.end(), own.step_time_s) - t.begin();
  std::string best;
  if (!t.empty() && t.front() < own.step_time_s)
    best = fmt::format("; the best is {:.1f}% faster", 100 * (1 - t.front() / own.step_time_s));
  // A pruned plan takes longer than the threshold: faster than `own` only when own is slower.
  const bool at_least = out.pruned > 0 && own.step_time_s > out.prune_threshold_s;
  return fmt::format(
      "scenario's plan ({}): {}; {}{} of the {} simulated plans that fit are "
      "faster{}\n",
      own.layout, format_time(own.step_time_s), at_least ? "at least " : "", faster, t.size(),
      best);
}

std::string bound_line(const SearchOutcome& out) {
  const auto& r = out.bound_ratios;
  if (r.empty()) return "";
  return fmt::format(
      "closed-form bound: {} plans ruled out without lowering; simulated step / "
      "bound over the {} simulated plans: median {:.2f}, worst {:.2f}\n",
      out.pruned_unlowered, r.size(), r[r.size() / 2], r.back());
}

std::string render_points(const std::vector<ExplorePoint>& pts) {
  // The plan column is as wide as its longest entry (at least 52), so the numbers line up.
  std::vector<std::string> plans;
  size_t width = 52;
  for (const auto& p : pts) {
    std::string plan;
    for (const auto& [k, v] : p.settings) plan += (plan.empty() ? "" : " ") + k + "=" + v;
    if (plan.empty()) plan = p.result.layout;
    width = std::max(width, plan.size());
    plans.push_back(std::move(plan));
  }
  std::string o;
  o += fmt::format("{:<4} {:<{}} {:>11} {:>12} {:>7} {:>10} {:>5}\n", "#", "plan", width, "step",
                   "tokens/s", "MFU", "mem GiB", "fits");
  for (size_t i = 0; i < pts.size(); ++i) {
    const ExplorePoint& p = pts[i];
    if (!p.valid) {
      o += fmt::format("{:<4} {:<{}} invalid: {}\n", i + 1, plans[i], width, p.error);
      continue;
    }
    o += fmt::format("{:<4} {:<{}} {:>11} {:>12.0f} {:>6.1f}% {:>10.2f} {:>5}\n", i + 1, plans[i],
                     width, format_time(p.result.step_time_s), p.result.tokens_per_s,
                     100 * p.result.mfu, p.result.memory_peak_gib,
                     p.result.fits_memory ? "yes" : "NO");
  }
  return o;
}

// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, a quote or a
// line break (a swept list such as cluster.stragglers, an error message), or always.
static std::string csv_field(const std::string& s, bool always_quote = false) {
  if (!always_quote && s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string points_csv(const std::vector<ExplorePoint>& pts) {
  std::string o;
  if (pts.empty()) return o;
  for (const auto& [k, v] : pts.front().settings) o += csv_field(k) + ",";
  o += "layout,valid,step_time_s,tokens_per_s,tflops_per_gpu,mfu,memory_peak_gib,fits_memory,"
       "error\n";
  for (const auto& p : pts) {
    for (const auto& [k, v] : p.settings) o += csv_field(v) + ",";
    o += fmt::format("{},{},{:.9g},{:.9g},{:.6g},{:.6g},{:.6g},{},{}\n",
                     csv_field(p.result.layout, true), p.valid, p.result.step_time_s,
                     p.result.tokens_per_s, p.result.tflops_per_gpu, p.result.mfu,
                     p.result.memory_peak_gib, p.result.fits_memory, csv_field(p.error, true));
  }
  return o;
}

static std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string points_html(const std::vector<ExplorePoint>& pts, const std::string& title) {
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  o += fmt::format("<title>stepcast: {}</title>\n", html_escape(title));
  o += "<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}"
       "td,th{padding:3px 10px;border-bottom:1px solid #ddd}th{cursor:pointer;background:#f0f0f0}"
       "td.num{text-align:right;font-variant-numeric:tabular-nums}.bad{color:#b00}</style>\n"
       "</head><body>\n";
  o += fmt::format("<h1>{}</h1>\n<p>{} plans. Click a column header to sort.</p>\n",
                   html_escape(title), pts.size());
  o += "<table id=\"plans\"><thead><tr>";
  std::vector<std::string> keys;
  if (!pts.empty())
    for (const auto& [k, v] : pts.front().settings) keys.push_back(k);
  for (const auto& k : keys) o += "<th>" + html_escape(k) + "</th>";
  for (const char* h : {"plan", "step time (s)", "tokens/s", "TFLOP/s per GPU", "MFU (%)",
                        "peak memory (GiB)", "fits"})
    o += std::string("<th>") + h + "</th>";
  o += "</tr></thead>\n<tbody>\n";
  for (const auto& p : pts) {
    o += "<tr>";
    for (const auto& [k, v] : p.settings) o += "<td>" + html_escape(v) + "</td>";
    if (!p.valid) {
      o += fmt::format("<td colspan=\"7\" class=\"bad\">invalid: {}</td></tr>\n",
                       html_escape(p.error));
      continue;
    }
    const Result& r = p.result;
    o += fmt::format(
        "<td>{}</td><td class=\"num\">{:.6f}</td><td class=\"num\">{:.0f}</td>"
        "<td class=\"num\">{:.1f}</td><td class=\"num\">{:.2f}</td>"
        "<td class=\"num\">{:.2f}</td><td{}>{}</td></tr>\n",
        html_escape(r.layout), r.step_time_s, r.tokens_per_s, r.tflops_per_gpu, 100 * r.mfu,
        r.memory_peak_gib, r.fits_memory ? "" : " class=\"bad\"", r.fits_memory ? "yes" : "no");
  }
  o += "</tbody></table>\n";
  // Sorting: numbers by value, text alphabetically; a second click reverses.
  o += "<script>\n"
       "document.querySelectorAll('#plans th').forEach(function(th, col) {\n"
       "  th.addEventListener('click', function() {\n"
       "    var tb = document.querySelector('#plans tbody');\n"
       "    var rows = Array.from(tb.rows);\n"
       "    var dir = th.dataset.dir === 'asc' ? -1 : 1;\n"
       "    th.dataset.dir = dir === 1 ? 'asc' : 'desc';\n"
       "    rows.sort(function(a, b) {\n"
       "      var x = a.cells[col] ? a.cells[col].textContent : '';\n"
       "      var y = b.cells[col] ? b.cells[col].textContent : '';\n"
       "      var nx = parseFloat(x), ny = parseFloat(y);\n"
       "      if (!isNaN(nx) && !isNaN(ny)) return dir * (nx - ny);\n"
       "      return dir * x.localeCompare(y);\n"
       "    });\n"
       "    rows.forEach(function(r) { tb.appendChild(r); });\n"
       "  });\n"
       "});\n"
       "// A link may ask for a sorted view: page.html#sort=COLUMN (0-based; clicked once).\n"
       "var m = /#sort=(\\d+)/.exec(location.hash);\n"
       "if (m) { var h = document.querySelectorAll('#plans th')[+m[1]]; if (h) h.click(); }\n"
       "</script>\n</body></html>\n";
  return o;
}

}  // namespace stepcast
