// Copyright 2026 The GMLake Authors.

#include "daemon/prometheus_text.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gmlake {

std::string PrometheusText::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integral values as integers ("3", not "3.0000"); others round-trip.
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  // The shortest of 15 or 17 digits that reads back as the same double
  // ("0.0025", not "0.0025000000000000001").
  std::string text = absl::StrFormat("%.15g", value);
  if (std::strtod(text.c_str(), nullptr) != value) {
    text = absl::StrFormat("%.17g", value);
  }
  return text;
}

std::string PrometheusText::EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusText::Family(absl::string_view name, absl::string_view type,
                            absl::string_view help) {
  std::string escaped;
  for (char c : help) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  absl::StrAppend(&out_, "# HELP ", name, " ", escaped, "\n# TYPE ", name, " ",
                  type, "\n");
}

void PrometheusText::Line(absl::string_view name, const Labels& labels,
                          absl::string_view value) {
  out_ += std::string(name);
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      absl::StrAppend(&out_, labels[i].first, "=\"",
                      EscapeLabelValue(labels[i].second), "\"");
    }
    out_ += '}';
  }
  absl::StrAppend(&out_, " ", value, "\n");
}

void PrometheusText::Sample(absl::string_view name, const Labels& labels,
                            double value) {
  Line(name, labels, FormatValue(value));
}

void PrometheusText::Sample(absl::string_view name, const Labels& labels,
                            uint64_t value) {
  // Exact, whatever the size (a double would round above 2^53).
  Line(name, labels, absl::StrCat(value));
}

void PrometheusText::Histogram(absl::string_view name, const Labels& labels,
                               absl::Span<const double> upper_bounds,
                               absl::Span<const uint64_t> cumulative,
                               double sum, uint64_t count) {
  const std::string bucket = absl::StrCat(name, "_bucket");
  for (size_t i = 0; i <= upper_bounds.size(); ++i) {
    Labels l = labels;
    l.emplace_back("le", i < upper_bounds.size() ? FormatValue(upper_bounds[i])
                                                 : std::string("+Inf"));
    Sample(bucket, l, i < cumulative.size() ? cumulative[i] : count);
  }
  Sample(absl::StrCat(name, "_sum"), labels, sum);
  Sample(absl::StrCat(name, "_count"), labels, count);
}

}  // namespace gmlake
