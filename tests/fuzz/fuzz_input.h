// Copyright 2026 The GMLake Authors.
//
// Helpers the fuzz targets share: reading a structured script out of the
// fuzzer's bytes (FuzzInput), counting this process's open descriptors,
// and failing loudly (FuzzCheck aborts, which libFuzzer and the replay test
// both report as a crash, with the message on stderr).

#ifndef GMLAKE_TESTS_FUZZ_FUZZ_INPUT_H_
#define GMLAKE_TESTS_FUZZ_FUZZ_INPUT_H_

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace gmlake {
namespace fuzz {

// Consumes the fuzzer's bytes front to back; past the end everything reads
// as zero and empty, so any input is a whole script.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | Byte();
    return v;
  }
  // Up to `max` bytes, the length taken from the input first.
  std::string Bytes(size_t max) {
    size_t n = Byte();
    if (max > 255) n = (n << 8) | Byte();
    if (n > max) n = max;
    if (n > size_ - std::min(pos_, size_)) n = size_ - std::min(pos_, size_);
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  // Everything not read yet.
  std::string Rest() {
    std::string out;
    if (pos_ < size_) {
      out.assign(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    }
    pos_ = size_;
    return out;
  }

 private:
  const uint8_t* const data_;
  const size_t size_;
  size_t pos_ = 0;
};

// /dev/null, opened once for good (before any count of open descriptors):
// the descriptor the targets send where a descriptor is wanted.
inline int DevNull() {
  static const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd;
}

// Descriptors this process has open.
inline int OpenFdCount() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return n;  // includes ".", ".." and the directory's own: constant
}

#define FUZZ_CHECK(cond, ...)                                            \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s: ", __FILE__, \
                   __LINE__, #cond);                                     \
      std::fprintf(stderr, __VA_ARGS__);                                 \
      std::fprintf(stderr, "\n");                                        \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

}  // namespace fuzz
}  // namespace gmlake

#endif  // GMLAKE_TESTS_FUZZ_FUZZ_INPUT_H_
