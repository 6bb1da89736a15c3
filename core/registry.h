// Registry<Entry>: what the libraries linked into a binary register at start-up, one list per
// Entry type for the whole process: the devices ranks train on (runtime/train/device_registry.h)
// and their backends' facts (kernels/device_facts.h). Entries carry a `name`, unique in the list.
//
// A library registers from a static initializer (hoist_plugin in CMakeLists.txt: the linker keeps
// such objects only when their archive is linked whole), so the list lives in this header:
// registering needs no library that reads it. An entry lives until it is removed (only tests
// remove theirs), so the pointers handed out stay valid. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hoist {

template <typename Entry>
class Registry {
 public:
  // The process's list. Made by its first user, whichever static initializer that is, and never
  // destroyed, so that static destructors may still look entries up.
  static Registry& Global() {
    static Registry* const registry = new Registry();
    return *registry;
  }

  // Adds `entry`; false, and nothing added, when an entry of its name is there already.
  bool Add(Entry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_) {
      if (e->name == entry.name) return false;
    }
    entries_.push_back(std::make_unique<const Entry>(std::move(entry)));
    return true;
  }

  // Removes the entry named `name`, if there is one (a test's own); pointers to it dangle.
  void Remove(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(entries_, [&](const auto& e) { return e->name == name; });
  }

  // The entry named `name`, nullptr when there is none.
  const Entry* Find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_) {
      if (e->name == name) return e.get();
    }
    return nullptr;
  }

  // Every entry, in the order they were added (which static initializers do not fix: callers
  // order them by what they mean).
  std::vector<const Entry*> Entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<const Entry*> entries;
    for (const auto& e : entries_) entries.push_back(e.get());
    return entries;
  }

 private:
  Registry() = default;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<const Entry>> entries_;  // guarded by mu_
};

}  // namespace hoist
