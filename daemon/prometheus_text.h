// Copyright 2026 The GMLake Authors.
//
// PrometheusText: writes Prometheus' text exposition format (version
// 0.0.4): per family a "# HELP" and a "# TYPE" line, then its samples,
// "name{label="value",...} value". Label values escape \, " and newline;
// help text escapes \ and newline; non-finite values are +Inf, -Inf, NaN.

#ifndef GMLAKE_DAEMON_PROMETHEUS_TEXT_H_
#define GMLAKE_DAEMON_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gmlake {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family. `type`: "gauge", "counter" or "histogram". A counter's
  // name ends in _total, by convention.
  void Family(absl::string_view name, absl::string_view type,
              absl::string_view help);
  // One sample of the current family (or, for histograms, of its _bucket,
  // _sum and _count series).
  void Sample(absl::string_view name, const Labels& labels, double value);
  void Sample(absl::string_view name, const Labels& labels, uint64_t value);
  // A whole histogram sample set: one _bucket per bound (label le), one for
  // +Inf, then _sum and _count. `cumulative` has one entry per bound plus
  // one for +Inf.
  void Histogram(absl::string_view name, const Labels& labels,
                 absl::Span<const double> upper_bounds,
                 absl::Span<const uint64_t> cumulative, double sum,
                 uint64_t count);

  // The text so far.
  const std::string& text() const { return out_; }

  static std::string FormatValue(double value);
  static std::string EscapeLabelValue(absl::string_view value);

 private:
  void Line(absl::string_view name, const Labels& labels,
            absl::string_view value);
  std::string out_;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_PROMETHEUS_TEXT_H_
