// Copyright 2026 The GMLake Authors.
//
// Histogram: counts of observations in fixed buckets, the shape Prometheus
// scrapes (cumulative bucket counts, a sum and a count). Not thread-safe:
// its owner's lock guards it (the Lake's, for pressure waits).

#ifndef GMLAKE_DAEMON_HISTOGRAM_H_
#define GMLAKE_DAEMON_HISTOGRAM_H_

#include <cstdint>
#include <vector>

namespace gmlake {

class Histogram {
 public:
  // `upper_bounds` must increase; an implicit last bucket takes the rest
  // (+Inf).
  explicit Histogram(std::vector<double> upper_bounds);

  // Bounds in seconds for waits from a millisecond to a minute: the
  // reclaim timeout is 2 s by default.
  static std::vector<double> LatencyBounds();

  void Observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Observations <= upper_bounds()[i]; one more entry at the end, for
  // +Inf, equal to count().
  std::vector<uint64_t> CumulativeCounts() const;
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; +Inf last
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_HISTOGRAM_H_
