// Copyright 2026 The GMLake Authors.
//
// Races TSAN reports inside Debian's gRPC, protobuf and Abseil, which are
// not built with TSAN: their synchronisation is invisible to it, so every
// report with one of their frames is a false one. Our own locks are
// visible (common/mutex.h), so reports in our code stay.

#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "race:libgrpc.so\n"
         // gRPC's C++ API is header code compiled into our libraries; its
         // completion queues still synchronise inside libgrpc.
         "race:grpc::\n"
         "race:grpc_core::\n"
         "race:grpc_event_engine::\n"
         "race:libgrpc++.so\n"
         "race:libgpr.so\n"
         "race:libprotobuf.so\n"
         "race:libabsl_\n"
         "deadlock:libgrpc.so\n"
         "signal:libgrpc.so\n";
}
#endif
