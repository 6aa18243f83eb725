// Copyright 2026 The GMLake Authors.
//
// Descriptors a client chose, in gmlaked.
//
// Closing a descriptor can block its closer for as long as whoever made it
// likes: the last close of a TCP socket with SO_LINGER and a full send
// queue waits out the linger (sk_stream_wait_close), a FUSE file's flush
// waits on its server, a tty drains. A client that passes such a
// descriptor over SCM_RIGHTS (or leaves one unread in a connection's
// receive queue, whose close drops it) would make a serving thread wait,
// and with it every other client. So, in gmlaked:
//
//  - What arrives is checked before it is used (CheckChunkDescriptor): a
//    chunk's descriptor is a shmem file (memfd, the host backend), a
//    dma-buf, or what the CUDA driver exports (a character device or an
//    anonymous inode); sockets, FIFOs and other files are refused.
//  - Serving threads never close a client's descriptor (nor a client's
//    connection, whose unread messages may carry some): CloseUntrusted
//    hands them to one detached closer thread, after turning off SO_LINGER
//    on sockets; the closer receives what a Unix socket's unread messages
//    carry and turns their linger off too, so that even it rarely waits.
//    It is never joined, so SIGTERM does not wait for it either.
//  - gRPC connections cannot carry descriptors to gRPC at all
//    (RefuseDescriptors, SO_PASSRIGHTS on the listening socket: the kernel
//    refuses the sendmsg; where it cannot, GrpcRelay in grpc_relay.h takes
//    them and hands them to CloseUntrusted).

#ifndef GMLAKE_DAEMON_UNTRUSTED_FD_H_
#define GMLAKE_DAEMON_UNTRUSTED_FD_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"

namespace gmlake {

// What fstat/fstatfs/F_GET_SEALS say of a descriptor.
struct DescriptorFacts {
  mode_t mode = 0;      // st_mode
  bool shmem = false;   // F_GET_SEALS works: tmpfs/hugetlbfs (memfd)
  bool dmabuf = false;  // on the dma-buf pseudo filesystem
};

// The facts of `fd`; InvalidArgument when fstat fails.
absl::Status GetDescriptorFacts(int fd, DescriptorFacts* facts);

// Describes a descriptor for messages: "a socket", "a regular file that is
// not a memfd", ...
std::string DescribeDescriptor(const DescriptorFacts& facts);

// Policy: OK for a descriptor that may stand for a chunk (a shmem file, a
// dma-buf, a character device or an anonymous inode: none of them waits
// on another process when closed); InvalidArgument naming the kind
// otherwise.
absl::Status CheckChunkDescriptorKind(const DescriptorFacts& facts);

// Checks each of `fds` with CheckChunkDescriptorKind; the error names the
// first refused one's position and kind.
absl::Status CheckChunkDescriptors(absl::Span<const UniqueFd> fds);

// Closes `fd` on the closer thread (after turning off SO_LINGER if it is
// a socket), never on the caller's.
void CloseUntrusted(UniqueFd fd);
void CloseUntrusted(std::vector<UniqueFd> fds);

// recv(2) of up to `n` bytes from a client's socket, without waiting, with
// room for control messages: descriptors that came with the bytes go to
// CloseUntrusted (a plain recv would have the kernel close them on the
// caller's thread). *descriptors, if given, counts them.
ssize_t RecvUntrusted(int sock, char* buf, size_t n, size_t* descriptors);

// Descriptors handed to CloseUntrusted and not closed yet.
uint64_t UntrustedClosesPending();

// Makes the kernel refuse SCM_RIGHTS sent to `sock`, a listening Unix
// socket (its connections inherit the setting) or a connection
// (SO_PASSRIGHTS = 0, Linux 6.16 and later). FailedPrecondition naming
// the kernel's answer when it cannot.
absl::Status RefuseDescriptors(int sock);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_UNTRUSTED_FD_H_
