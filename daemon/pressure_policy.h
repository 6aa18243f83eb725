// Copyright 2026 The GMLake Authors.
//
// The pressure policy: whom gmlaked asks for memory, for how much, how long
// an asked session has to deliver, and when a waiting lease gives up. Pure
// decisions, no state: the Lake (lake_lease.cc) describes the sessions and
// the debts it keeps, and acts on what these return.
//
// Whom: what a session says it caches and does not use goes first: giving
// it back costs that process nothing. A claim counts only up to what the
// session holds (gmlaked knows that; a report of 1 TiB from a holder of one
// chunk is one chunk), and is halved for each request the session lately
// answered, or let pass, without returning what its claim promised: a
// session that does not deliver is asked last. The largest credible cache
// is asked first, so as few processes as possible are disturbed; among
// equals, the largest holder. Only when the caches do not cover what the
// asker wants are the holders asked for the rest, in the same order (their
// allocators may cache more than they last said, or free more on request).
//
// How much: what the asker will need, not one chunk at a time. A lease asks
// for its shortfall or, if more, the asker's recent growth (bytes leased
// over a window) or its deficit against its own recent peak (what it held
// before others took it back) and 1/64 of that peak: a process taking its
// turn on a shared GPU gets back its working set in one round. The margin,
// because a turn rarely needs exactly what the last one held (lease-ahead
// steps, chunk sizes, a voluntary return that lowered the peak): without
// it an inference switch of lake_share_test took a top-up round for ~1% of
// its peak (26 MiB after 2.26 GiB).
//
// Credible caches are asked first, and only they are promises; the rest of
// the want is asked of what the sessions hold, unpromised (an asked
// allocator gives back the free cache it has, never live memory). A cache
// report is up to a report period old: an idle process that freed its
// turn's memory after its last report caches more than it says, and a want
// capped at the report cost a top-up round at most switches.
// lake_share_test's four switches under load: 6-9 rounds asking only
// reported caches beyond the shortfall, 5-7 asking the whole want, 4 with
// the margin too (24 of 24 runs, twelve at once on two cores). The 16-trace
// lake demo, whose growth window makes its counts follow the machine's
// speed, spreads over 65-146 rounds from run to run in all three. Never
// past the asker's quota; chunks that come back beyond the lease stay free
// in the lake for its next leases.
//
// When to give up: a lease waits while memory is on its way (a request not
// answered yet, within its patience, or bytes still arriving), asks others
// for what is still missing when an asked session delivers less or stays
// silent, and fails only when nothing is on its way, nobody is left to ask,
// or nothing arrived for the reclaim timeout.

#ifndef GMLAKE_DAEMON_PRESSURE_POLICY_H_
#define GMLAKE_DAEMON_PRESSURE_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace gmlake {

// A session that may be asked: it watches, is not the one leasing, holds
// chunks on the device and owes the asker nothing already.
struct PressureCandidate {
  uint64_t session = 0;
  uint64_t cached_bytes = 0;  // as it last reported them on the device
  uint64_t leased_bytes = 0;  // what it holds there
  // Requests it lately settled without returning what its cache report
  // promised (0 after one it delivered in full).
  uint32_t undelivered = 0;
};

struct PressureAsk {
  uint64_t session = 0;
  uint64_t bytes = 0;
  // The part of `bytes` that the session's credible cache covers: what it
  // is expected to return (a request beyond it is a request, not a
  // promise).
  uint64_t promised_bytes = 0;
};

// The cache of `c` the policy believes: its report, at most what it holds,
// halved for each undelivered request.
uint64_t CredibleCache(const PressureCandidate& c);

// Splits the asks over `candidates`: `want_bytes` (>= short_bytes) from
// credible caches, largest first; then what the caches do not cover from
// what the sessions hold, in the same order. Each session appears at most
// once, never asked for more than it holds. Empty when nobody holds
// anything.
std::vector<PressureAsk> ChoosePressure(
    absl::Span<const PressureCandidate> candidates, uint64_t short_bytes,
    uint64_t want_bytes);
// The same with want_bytes = short_bytes.
std::vector<PressureAsk> ChoosePressure(
    absl::Span<const PressureCandidate> candidates, uint64_t short_bytes);

// A want back to the peak adds 1/64 of it by default (see above).
inline constexpr uint64_t kDefaultPeakMarginDivisor = 64;

// What a short lease asks for (see above).
struct PressureNeedInput {
  uint64_t short_bytes = 0;   // what the lease lacks now
  uint64_t growth_bytes = 0;  // the asker leased this over the window
  uint64_t peak_bytes = 0;    // the most it held lately on the device
  uint64_t held_bytes = 0;    // what it holds there now (before this lease)
  // What it may still lease under its quotas, this lease included
  // (UINT64_MAX: no quota).
  uint64_t room_bytes = UINT64_MAX;
  // The margin back to the peak is 1/margin_divisor of it (0: none;
  // --pressure_peak_margin_divisor).
  uint64_t margin_divisor = kDefaultPeakMarginDivisor;
};
uint64_t PressureWant(const PressureNeedInput& in);

// One request sent to a session and not settled yet, as the Lake sees it.
struct PressureDebtView {
  uint64_t asked_bytes = 0;
  uint64_t promised_bytes = 0;
  uint64_t returned_bytes = 0;  // since it was asked
  bool answered = false;        // it reported usage after handling it
  bool session_gone = false;
  // Since it was asked or last returned bytes, whichever is later.
  absl::Duration since_progress;
};

enum class DebtState {
  kPending,    // on its way: others are not asked for it yet
  kOverdue,    // silent past its patience: others are asked for it, but
               // its late bytes are still welcome (the lease may wait)
  kDelivered,  // returned all it was asked
  kShort,      // answered (or gone) having returned less than asked
};
DebtState JudgeDebt(const PressureDebtView& d, absl::Duration patience);
// Whether a settled or overdue debt counts against the session (it
// returned less than it promised).
bool Undelivered(const PressureDebtView& d);

// What a short lease does next.
enum class LeaseStep {
  kAsk,     // send the asks chosen (bytes are missing that nobody owes)
  kWait,    // memory is on its way, or may still come
  kGiveUp,  // nothing on its way and nobody left to ask, or no progress
};
struct LeaseStepInput {
  uint64_t short_bytes = 0;
  uint64_t pending_bytes = 0;     // owed to this asker by kPending debts
  bool overdue = false;           // some debt of this asker is kOverdue
  bool can_ask = false;           // ChoosePressure would ask someone
  absl::Duration since_progress;  // since bytes last came or asks went
  absl::Duration reclaim_timeout;
};
LeaseStep NextLeaseStep(const LeaseStepInput& in);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_PRESSURE_POLICY_H_
