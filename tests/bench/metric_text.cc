#include "metric_text.h"

#include <cstdlib>
#include <string>

namespace tcc::bench {

double SumSeries(std::string_view page, std::string_view prefix,
                 std::string_view contains) {
  double sum = 0;
  while (!page.empty()) {
    const size_t eol = page.find('\n');
    std::string_view line = page.substr(0, eol);
    page = eol == std::string_view::npos ? std::string_view{}
                                         : page.substr(eol + 1);
    if (line.empty() || line.front() == '#') continue;
    // The series ends at its labels' '}' (label values may hold spaces), or
    // at the first space when it has none.
    const size_t brace = line.find('{');
    const size_t space = line.find(' ');
    size_t end = space;
    if (brace != std::string_view::npos && brace < space) {
      end = line.rfind('}');
      if (end == std::string_view::npos) continue;
      ++end;
    }
    if (end == std::string_view::npos || end >= line.size()) continue;
    const std::string_view series = line.substr(0, end);
    if (series.substr(0, prefix.size()) != prefix) continue;
    if (!contains.empty() && series.find(contains) == std::string_view::npos) {
      continue;
    }
    std::string_view value = line.substr(end);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    value = value.substr(0, value.find(' '));
    // strtod: from_chars for doubles needs a newer libstdc++ than Debian 12's
    // in every mode, and the exposition writes "+Inf"/"NaN" too.
    const std::string text(value);
    char* parsed_end = nullptr;
    const double v = std::strtod(text.c_str(), &parsed_end);
    if (text.empty() || parsed_end != text.c_str() + text.size()) continue;
    sum += v;
  }
  return sum;
}

}  // namespace tcc::bench
