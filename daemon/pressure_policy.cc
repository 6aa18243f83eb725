// Copyright 2026 The GMLake Authors.

#include "daemon/pressure_policy.h"

#include <algorithm>

namespace gmlake {

uint64_t CredibleCache(const PressureCandidate& c) {
  const uint64_t bounded = std::min(c.cached_bytes, c.leased_bytes);
  return c.undelivered >= 64 ? 0 : bounded >> c.undelivered;
}

std::vector<PressureAsk> ChoosePressure(
    absl::Span<const PressureCandidate> candidates, uint64_t short_bytes,
    uint64_t want_bytes) {
  struct Left {
    PressureCandidate c;
    uint64_t credible = 0;
    uint64_t asked = 0;
    uint64_t promised = 0;
  };
  std::vector<Left> order;
  order.reserve(candidates.size());
  for (const PressureCandidate& c : candidates) {
    if (c.leased_bytes > 0) order.push_back({c, CredibleCache(c)});
  }
  // Largest credible cache first; among equals, those that delivered, then
  // the largest holder; then the oldest session, so that the order does
  // not depend on the input's.
  std::sort(order.begin(), order.end(), [](const Left& a, const Left& b) {
    if (a.credible != b.credible) return a.credible > b.credible;
    if (a.c.undelivered != b.c.undelivered) {
      return a.c.undelivered < b.c.undelivered;
    }
    if (a.c.leased_bytes != b.c.leased_bytes) {
      return a.c.leased_bytes > b.c.leased_bytes;
    }
    return a.c.session < b.c.session;
  });
  // First what they credibly cache, up to what the asker wants.
  uint64_t wanted = std::max(want_bytes, short_bytes);
  uint64_t covered = 0;
  for (Left& l : order) {
    if (wanted == 0) break;
    const uint64_t ask = std::min(wanted, l.credible);
    l.asked = l.promised = ask;
    wanted -= ask;
    covered += ask;
  }
  // Then the rest of the want from what they hold, unpromised (their
  // allocators may cache more than they last said, or free more on
  // request).
  uint64_t remaining = std::max(want_bytes, short_bytes) - covered;
  for (Left& l : order) {
    if (remaining == 0) break;
    const uint64_t ask = std::min(remaining, l.c.leased_bytes - l.asked);
    l.asked += ask;
    remaining -= ask;
  }
  std::vector<PressureAsk> out;
  for (const Left& l : order) {
    if (l.asked > 0) out.push_back({l.c.session, l.asked, l.promised});
  }
  return out;
}

std::vector<PressureAsk> ChoosePressure(
    absl::Span<const PressureCandidate> candidates, uint64_t short_bytes) {
  return ChoosePressure(candidates, short_bytes, short_bytes);
}

uint64_t PressureWant(const PressureNeedInput& in) {
  // The peak and a margin (see the header): a turn rarely needs exactly
  // what the last one held.
  const uint64_t peak =
      in.peak_bytes +
      (in.margin_divisor == 0 ? 0 : in.peak_bytes / in.margin_divisor);
  const uint64_t back_to_peak = peak - std::min(peak, in.held_bytes);
  const uint64_t ahead =
      std::min(std::max(in.growth_bytes, back_to_peak), in.room_bytes);
  return std::max(in.short_bytes, ahead);
}

DebtState JudgeDebt(const PressureDebtView& d, absl::Duration patience) {
  if (d.returned_bytes >= d.asked_bytes) return DebtState::kDelivered;
  if (d.answered || d.session_gone) return DebtState::kShort;
  return d.since_progress >= patience ? DebtState::kOverdue
                                      : DebtState::kPending;
}

bool Undelivered(const PressureDebtView& d) {
  return d.returned_bytes < d.promised_bytes;
}

LeaseStep NextLeaseStep(const LeaseStepInput& in) {
  if (in.pending_bytes < in.short_bytes && in.can_ask) return LeaseStep::kAsk;
  if (in.since_progress >= in.reclaim_timeout) return LeaseStep::kGiveUp;
  if (in.pending_bytes > 0 || in.overdue) return LeaseStep::kWait;
  return LeaseStep::kGiveUp;
}

}  // namespace gmlake
