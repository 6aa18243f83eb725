// Copyright 2026 The GMLake Authors.

#include "client/chunk_cover.h"

#include <algorithm>

namespace gmlake {

size_t MaxCoverPages(size_t rest, size_t room, size_t max_extra) {
  return rest + std::min(room, max_extra);
}

bool BetterCover(size_t pages, size_t best, size_t rest, size_t max_pages,
                 bool largest) {
  if (pages <= rest || pages > max_pages) return false;
  if (best == 0) return true;
  return largest ? pages > best : pages < best;
}

bool CoverBeforeStealing(bool small_pool, bool grows_free_block,
                         size_t rest_pages) {
  return !small_pool && grows_free_block && rest_pages == 1;
}

bool CoverNow(bool small_pool, uint64_t stranded, uint64_t allocated_peak,
              double after) {
  if (small_pool || after <= 0) return true;
  return static_cast<double>(stranded) >=
         after * static_cast<double>(allocated_peak);
}

}  // namespace gmlake
