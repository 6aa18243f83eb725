// Copyright 2026 The GMLake Authors.

#include "daemon/histogram.h"

#include <algorithm>
#include <utility>

namespace gmlake {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

std::vector<double> Histogram::LatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,   1,      2.5,   5,    10,    30,   60};
}

void Histogram::Observe(double value) {
  // The first bound >= value: Prometheus' "le" (less or equal).
  const size_t i =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(counts_.size());
  uint64_t total = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    total += counts_[i];
    out[i] = total;
  }
  return out;
}

}  // namespace gmlake
