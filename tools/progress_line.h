// Copyright 2026 The GMLake Authors.
//
// One line of progress on stderr for the long-running tools
// (gmlake-handoff, the lake-share benchmark), rewritten in place; an empty
// line clears it.

#ifndef GMLAKE_TOOLS_PROGRESS_LINE_H_
#define GMLAKE_TOOLS_PROGRESS_LINE_H_

#include <cstdio>
#include <string>

namespace gmlake {

// Shows `line` (when `on`), over the one shown before.
inline void Progress(bool on, const std::string& line) {
  if (!on) return;
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_PROGRESS_LINE_H_
