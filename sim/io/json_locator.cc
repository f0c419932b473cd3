#include "sim/io/json_locator.h"

#include <algorithm>
#include <tuple>

namespace stepcast {

InputIssue json_syntax_issue(const std::string& text, const std::string& file, std::size_t byte,
                             const std::string& what) {
  int line = 1, col = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  const std::size_t colon = what.find(": ");
  return InputIssue{
      file, line, col, "",
      "invalid JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2))};
}

nlohmann::json parse_json(const std::string& text, const std::string& file) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(json_syntax_issue(text, file, e.byte, e.what()));
  } catch (const nlohmann::json::exception& e) {
    // No position: the message quotes the offending token ("number overflow parsing
    // '1e400'"); its first occurrence in the text places it.
    const std::string what = e.what();
    const std::size_t a = what.find('\''), b = what.rfind('\'');
    std::size_t byte = 0;
    if (a != std::string::npos && b > a + 1) {
      const std::size_t at = text.find(what.substr(a + 1, b - a - 1));
      if (at != std::string::npos) byte = at + 1;
    }
    InputIssue issue = json_syntax_issue(text, file, byte, what);
    // "[json.exception.out_of_range.406] number overflow ..." -> "number overflow ...".
    const std::size_t tag = what.find("] ");
    if (tag != std::string::npos) issue.message = "invalid JSON: " + what.substr(tag + 2);
    if (byte == 0) issue.line = issue.column = 0;
    throw InputError(std::move(issue));
  }
}

void locate_json_pointer_issues(std::vector<InputIssue>& issues, const std::string& text) {
  bool any = false;
  for (const InputIssue& i : issues)
    any = any || (i.line == 0 && (i.key.empty() || i.key[0] == '/'));
  if (!any) return;
  const JsonLocator at(text);
  for (InputIssue& i : issues) {
    if (i.line != 0 || !(i.key.empty() || i.key[0] == '/')) continue;
    // "/gemm/3/time_us" -> "gemm[3].time_us" (JsonLocator's paths); "~1" is "/", "~0" is "~".
    std::string path;
    std::size_t p = 1;
    while (p <= i.key.size() && !i.key.empty()) {
      const std::size_t q = std::min(i.key.find('/', p), i.key.size());
      std::string seg;
      for (std::size_t k = p; k < q; ++k) {
        if (i.key[k] == '~' && k + 1 < q && (i.key[k + 1] == '0' || i.key[k + 1] == '1')) {
          seg += i.key[k + 1] == '1' ? '/' : '~';
          ++k;
        } else {
          seg += i.key[k];
        }
      }
      const bool index = !seg.empty() && seg.find_first_not_of("0123456789") == std::string::npos;
      path += index ? "[" + seg + "]" : (path.empty() ? seg : "." + seg);
      p = q + 1;
    }
    std::tie(i.line, i.column) = at.find(path);
  }
}

}  // namespace stepcast
