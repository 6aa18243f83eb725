#!/usr/bin/env python3
# Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/): small
# well-formed scripts that reach each handler, from which libFuzzer mutates.
# Each file is named after what it does. Rerun after changing a target's
# input format: python3 tests/fuzz/make_seeds.py
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x44464D47


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field_varint(num, value):
    return varint(num << 3) + varint(value)


def field_bytes(num, data):
    return varint((num << 3) | 2) + varint(len(data)) + data


def frame(payload, fds=0):
    groups = (fds + 252) // 253
    return struct.pack("<III", MAGIC, len(payload), fds) + b"\0" * max(
        0, groups - 1) + payload


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- fd_frame: mode byte, then the stream -------------------------------------
# mode: bits 0-1 payload limit (0, 16, 4096, 65536), bits 2-3 descriptor limit
# (0, 1, 3, 253), bits 4-5 descriptors attached, bit 6 seqpacket, bit 7 cut
# into 5-byte writes.
ALL = 2 | (3 << 2)
write("fd_frame", "one_message", bytes([ALL]) + frame(b"hello"))
write("fd_frame", "two_messages", bytes([ALL]) + frame(b"a") + frame(b"bc"))
write("fd_frame", "one_descriptor", bytes([ALL | (1 << 4)]) + frame(b"abc", 1))
write("fd_frame", "announced_300_sent_3",
      bytes([ALL | (3 << 4)]) + frame(b"x", 300))
write("fd_frame", "descriptors_unannounced",
      bytes([ALL | (2 << 4)]) + frame(b"abc"))
write("fd_frame", "bad_magic", bytes([ALL]) + b"GET / HTTP/1.1\r\n\r\n")
write("fd_frame", "payload_over_limit", bytes([1 | (3 << 2)]) + frame(b"x" * 40))
write("fd_frame", "cut_header", bytes([ALL]) + frame(b"hello")[:7])
write("fd_frame", "seqpacket", bytes([ALL | 0x40]) + frame(b"hello"))
write("fd_frame", "seqpacket_small_writes",
      bytes([ALL | 0x40 | 0x80]) + frame(b"hello world"))
write("fd_frame", "small_writes_with_fds",
      bytes([ALL | 0x80 | (1 << 4)]) + frame(b"hello world", 1))

# --- fd_socket: a script of one-byte ops and their arguments ------------------
# 0 bind, 1 claim, 2 lease beside, 3 return beside, 4 framed payload,
# 5 raw bytes (framed payloads and raw bytes: 2-byte length first), 6 reconnect, 7 end session beside, 8 liveness,
# 9 adopt.
# A request: how (bits 0-1 == 3: made-up session id; bits 2-3: token right,
# flipped, empty, made-up), session index.
BIND_S0 = bytes([0, 0x00, 0x00])
BIND_S1 = bytes([0, 0x00, 0x01])
LEASE_S0_2 = bytes([2, 0x00, 0x01])
CLAIM_LAST_S0 = bytes([1, 0x00, 0x00, 0x00])
write("fd_socket", "bind_lease_claim_return",
      BIND_S0 + LEASE_S0_2 + CLAIM_LAST_S0 + bytes([3]))
write("fd_socket", "bind_wrong_token", bytes([0, 0x04, 0x00]))
write("fd_socket", "bind_empty_token", bytes([0, 0x08, 0x00]))
write("fd_socket", "bind_unknown_session", bytes([0, 0x03]) + b"\0" * 7 + b"\x63")
write("fd_socket", "bind_other_pid", BIND_S1)
write("fd_socket", "bind_twice", BIND_S0 + BIND_S0)
write("fd_socket", "claim_unbound", LEASE_S0_2 + CLAIM_LAST_S0)
write("fd_socket", "claim_twice",
      BIND_S0 + LEASE_S0_2 + CLAIM_LAST_S0 + CLAIM_LAST_S0)
write("fd_socket", "claim_made_up_lease",
      BIND_S0 + bytes([1, 0x00, 0x00, 0x01]) + b"\0" * 7 + b"\x07")
write("fd_socket", "claim_after_return",
      BIND_S0 + LEASE_S0_2 + bytes([3]) + CLAIM_LAST_S0)
write("fd_socket", "claim_after_session_end",
      BIND_S0 + LEASE_S0_2 + bytes([7, 0x00, 0x00]) + CLAIM_LAST_S0)
write("fd_socket", "garbage_frame",
      bytes([4, 0, 5]) + b"\xff\xff\xff\xff\xff" + bytes([0]))
write("fd_socket", "descriptors_to_daemon",
      BIND_S0 + bytes([4, 0, 0]) + bytes([2]))
write("fd_socket", "raw_bytes_unbound", bytes([5, 0, 6]) + b"GMFD\0\0")
write("fd_socket", "raw_http", bytes([5, 0, 16]) + b"GET / HTTP/1.1\r\n")
write("fd_socket", "reconnect_and_bind_again",
      BIND_S0 + bytes([6]) + BIND_S0 + LEASE_S0_2 + CLAIM_LAST_S0)
write("fd_socket", "close_then_liveness",
      BIND_S0 + LEASE_S0_2 + bytes([7, 0x00, 0x01, 8]))
# 9 adopt: how, session, device, count, sized, sizes..., real descriptors.
write("fd_socket", "adopt_dev_null_unsized",
      BIND_S0 + bytes([9, 0x00, 0x00, 0, 2, 0, 0]))
write("fd_socket", "adopt_held_chunks_sized",
      BIND_S0 + LEASE_S0_2 + bytes([9, 0x00, 0x00, 0, 2, 1, 0, 1, 1]))
write("fd_socket", "adopt_odd_and_huge_sizes",
      BIND_S0 + bytes([9, 0x00, 0x00, 0, 3, 1, 2, 3, 0, 0]))
write("fd_socket", "adopt_unbound", bytes([9, 0x00, 0x00, 0, 1, 0, 0]))

# --- lake_service: a script of calls ------------------------------------------
# op: 0 OpenSession, 1 bind beside, 2 Lease, 3 Return, 4 ReportUsage,
# 5 CloseSession, 6 Status, 7 Trim, 8 liveness, 9 end session beside.
# A request: 2-byte length and its protobuf bytes; for a session's call
# (Lease, Return, ReportUsage, CloseSession) then how (bit 0: a real
# session's id, bit 1: and its token) and the session index if bit 0.


def req(payload, how=None, session=0):
    out = struct.pack(">H", len(payload)) + payload
    if how is not None:
        out += bytes([how])
        if how & 1:
            out += bytes([session])
    return out


OPEN = bytes([0]) + req(field_varint(1, 1) + field_bytes(3, b"job") +
                        field_varint(4, 1)) + bytes([0])
OPEN_V1 = bytes([0]) + req(field_varint(1, 1)) + bytes([1])
BIND0 = bytes([1, 0, 1])  # session 0 as uid 1000
BIND1 = bytes([1, 1, 2])  # session 1 as uid 2000
LEASE0 = bytes([2]) + req(b"", 3, 0) + bytes([1, 3])
LEASE0_BYTES = bytes([2]) + req(field_varint(5, 100000), 3, 0) + bytes([0])
RETURN0 = bytes([3]) + req(b"", 3, 0) + bytes([2, 0, 1])
USAGE0 = bytes([4]) + req(
    field_bytes(3, field_varint(1, 0) + field_varint(2, 65536) +
                field_varint(3, 131072)), 3, 0)
CLOSE0 = bytes([5]) + req(b"", 3, 0)
STATUS_AS = [bytes([6]) + req(b"") + bytes([c]) for c in range(4)]
TRIM_AS = [bytes([7]) + req(field_varint(1, 0)) + bytes([c]) for c in range(4)]
write("lake_service", "open_bind_lease_return_close",
      OPEN + BIND0 + LEASE0 + RETURN0 + CLOSE0)
write("lake_service", "open_bind_lease_bytes", OPEN + BIND0 + LEASE0_BYTES)
write("lake_service", "two_users_status_as_each",
      OPEN + OPEN_V1 + BIND0 + BIND1 + LEASE0 + b"".join(STATUS_AS))
write("lake_service", "trim_as_each", OPEN + BIND0 + LEASE0 + RETURN0 +
      b"".join(TRIM_AS))
write("lake_service", "usage_report", OPEN + BIND0 + LEASE0 + USAGE0)
write("lake_service", "lease_unbound", OPEN + LEASE0)
write("lake_service", "lease_wrong_token",
      OPEN + BIND0 + bytes([2]) + req(b"", 1, 0) + bytes([1, 3]))
write("lake_service", "lease_bad_device",
      OPEN + BIND0 + bytes([2]) + req(field_varint(3, 7), 3, 0) + bytes([1, 3]))
write("lake_service", "lease_count_and_bytes",
      OPEN + BIND0 + bytes([2]) + req(field_varint(4, 2) + field_varint(5, 9),
                                      3, 0) + bytes([0]))
write("lake_service", "return_anothers_chunks",
      OPEN + OPEN_V1 + BIND0 + BIND1 + LEASE0 + bytes([3]) +
      req(b"", 3, 1) + bytes([2, 0, 1]))
write("lake_service", "end_then_liveness",
      OPEN + BIND0 + LEASE0 + bytes([9, 0, 8]))
# Leases naming their chunks' size (field 7): twice the unit, odd, huge,
# and a count whose product with the size overflows.
for name, size, count in [("lease_sized", 2 * 65536, 2),
                          ("lease_sized_odd", 100000, 1),
                          ("lease_sized_huge", 1 << 62, 1),
                          ("lease_sized_overflow", 2 * 65536, 1 << 60)]:
    write("lake_service", name,
          OPEN + BIND0 + bytes([2]) +
          req(field_varint(4, count) + field_varint(7, size), 3, 0) +
          bytes([0]))
write("lake_service", "bad_version", bytes([0]) + req(field_varint(4, 9)) +
      bytes([0]))
