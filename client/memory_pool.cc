// Copyright 2026 The GMLake Authors.

#include "client/memory_pool.h"

#include <algorithm>

namespace gmlake {

uint32_t MemoryPools::CreateOrIncref(MempoolId id) {
  Entry& e = pools_[id];
  if (e.refs == 0) e.tag = next_tag_++;
  ++e.refs;
  return e.tag;
}

std::optional<uint32_t> MemoryPools::Release(MempoolId id) {
  auto it = pools_.find(id);
  if (it == pools_.end()) return std::nullopt;
  if (--it->second.refs > 0) return std::nullopt;
  const uint32_t tag = it->second.tag;
  pools_.erase(it);
  no_split_tags_.erase(
      std::remove(no_split_tags_.begin(), no_split_tags_.end(), tag),
      no_split_tags_.end());
  // A route into a retired pool would hand its tag out again.
  routes_.erase(std::remove_if(routes_.begin(), routes_.end(),
                               [&](const Route_& r) { return r.tag == tag; }),
                routes_.end());
  return tag;
}

uint32_t MemoryPools::BeginAllocateTo(MempoolId id, StreamFilter filter) {
  auto it = pools_.find(id);
  const uint32_t tag = it == pools_.end() ? CreateOrIncref(id) : it->second.tag;
  routes_.push_back({id, tag, std::move(filter)});
  return tag;
}

bool MemoryPools::EndAllocateTo(MempoolId id) {
  const size_t before = routes_.size();
  routes_.erase(std::remove_if(routes_.begin(), routes_.end(),
                               [&](const Route_& r) { return r.id == id; }),
                routes_.end());
  return routes_.size() != before;
}

uint32_t MemoryPools::Route(StreamHandle stream) const {
  for (auto r = routes_.rbegin(); r != routes_.rend(); ++r) {
    if (!r->filter || r->filter(stream)) return r->tag;
  }
  return 0;
}

std::optional<uint32_t> MemoryPools::TagOf(MempoolId id) const {
  auto it = pools_.find(id);
  if (it == pools_.end()) return std::nullopt;
  return it->second.tag;
}

std::optional<MempoolId> MemoryPools::IdOf(uint32_t tag) const {
  if (tag == 0) return std::nullopt;
  for (const auto& [id, e] : pools_) {
    if (e.tag == tag) return id;
  }
  return std::nullopt;
}

bool MemoryPools::SetUseOnOom(MempoolId id, bool use) {
  auto it = pools_.find(id);
  if (it == pools_.end()) return false;
  it->second.use_on_oom = use;
  return true;
}

std::vector<uint32_t> MemoryPools::UseOnOomTags() const {
  std::vector<uint32_t> tags;
  for (const auto& [id, e] : pools_) {
    if (e.use_on_oom) tags.push_back(e.tag);
  }
  std::sort(tags.begin(), tags.end());  // tags grow: oldest first
  return tags;
}

bool MemoryPools::SetNoSplit(MempoolId id) {
  auto it = pools_.find(id);
  if (it == pools_.end()) return false;
  if (!NoSplit(it->second.tag)) no_split_tags_.push_back(it->second.tag);
  return true;
}

bool MemoryPools::NoSplit(uint32_t tag) const {
  return std::find(no_split_tags_.begin(), no_split_tags_.end(), tag) !=
         no_split_tags_.end();
}

int MemoryPools::use_count(MempoolId id) const {
  auto it = pools_.find(id);
  return it == pools_.end() ? 0 : it->second.refs;
}

}  // namespace gmlake
