// Copyright 2026 The GMLake Authors.

#include "client/stitch_policy.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace gmlake {
namespace {

// A large request: one that grows in place with the wide reach
// (GrowInPlace) and takes the larger slack while the peak rises
// (GrowSlackFor), as a KV cache's tensors (100-200 chunks each) do.
constexpr uint64_t kLarge = uint64_t{64} << 20;

size_t PagesFor(size_t bytes, size_t page_size) {
  return (bytes + page_size - 1) / page_size;
}

}  // namespace

std::optional<Placement> ChoosePlacement(absl::Span<const GapView> gaps,
                                         size_t size, size_t page_size) {
  std::optional<Placement> best;
  size_t best_room = 0;
  auto consider = [&](size_t gap, size_t first_page, size_t pages) {
    // Unmapped pages left right after the mapping: room to grow in place.
    const GapView& g = gaps[gap];
    const size_t room = g.first_page + g.pages - (first_page + pages);
    if (!best || pages < best->pages ||
        (pages == best->pages &&
         (room > best_room ||
          (room == best_room && first_page < best->first_page)))) {
      best = Placement{gap, first_page, pages};
      best_room = room;
    }
  };
  for (size_t i = 0; i < gaps.size(); ++i) {
    const GapView& g = gaps[i];
    if (g.pages == 0) continue;
    // Grow the segment on the left into the gap.
    const size_t left =
        size > g.free_before ? PagesFor(size - g.free_before, page_size) : 0;
    if (left <= g.pages) consider(i, g.first_page, std::max<size_t>(left, 1));
    // Grow the segment on the right backwards into the gap.
    const size_t right =
        size > g.free_after ? PagesFor(size - g.free_after, page_size) : 0;
    if (right >= 1 && right <= g.pages) {
      consider(i, g.first_page + g.pages - right, right);
    }
    // Fill the gap and join both segments.
    if (g.free_before + g.pages * page_size + g.free_after >= size) {
      consider(i, g.first_page, g.pages);
    }
  }
  return best;
}

std::vector<size_t> OrderVictims(absl::Span<const VictimView> victims) {
  std::vector<size_t> order(victims.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(victims[a].block_size, victims[a].order) <
           std::tie(victims[b].block_size, victims[b].order);
  });
  return order;
}

bool GrowRatherThanStitch(uint64_t reserved, uint64_t grow_bytes,
                          uint64_t allocated_peak, double slack) {
  if (slack <= 0) return false;
  const double budget = static_cast<double>(allocated_peak) * (1.0 + slack);
  return static_cast<double>(reserved) + static_cast<double>(grow_bytes) <=
         budget;
}

double GrowSlackFor(uint64_t size, bool raises_peak, double slack,
                    double slack_large) {
  // grow_slack:0 means stitch whenever free chunks exist, for every size.
  if (slack <= 0 || size < kLarge || !raises_peak) return slack;
  return std::max(slack, slack_large);
}

bool GrowInPlace(uint64_t block_size, uint64_t size, double reach) {
  constexpr double kSmallReach = 1.0 / 16;
  if (size < kLarge) reach = std::min(reach, kSmallReach);
  if (reach <= 0 || block_size >= size) return false;
  return static_cast<double>(size - block_size) <=
         reach * static_cast<double>(size);
}

bool BetterFit(size_t pages, size_t best, size_t rest) {
  const bool fits = pages <= rest, best_fits = best <= rest;
  if (fits != best_fits) return fits;
  return fits ? pages > best : pages < best;
}

}  // namespace gmlake
