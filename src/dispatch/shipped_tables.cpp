// The shipped rule tables and the choice among them (shipped_tables.hpp). Each generated table
// defines kGpu, kDate, kDependentMaxN and kCells; it is included into a namespace of its own.
#include "dispatch/shipped_tables.hpp"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>

#include "sparrow/dispatch.hpp"

namespace sparrow {

namespace h100 {
#include "dispatch/rule_table_h100.inc"
}
namespace h200 {
#include "dispatch/rule_table_h200.inc"
}

namespace {

constexpr int kMaxDevices = 64;

const ShippedRuleTable* g_forced = nullptr;  // ScopedActiveRuleTable's, while one lives

// The table of the GPU named `name`, or null.
const ShippedRuleTable* table_named(const char* name) {
  for (const ShippedRuleTable& t : shipped_rule_tables())
    if (std::strcmp(t.gpu, name) == 0) return &t;
  return nullptr;
}

std::string shipped_names() {
  std::string s;
  for (const ShippedRuleTable& t : shipped_rule_tables()) {
    if (!s.empty()) s += ", ";
    s += std::string("\"") + t.gpu + "\"";
  }
  return s;
}

// SPARROW_RULE_TABLE_GPU's table, read once; null when unset or naming no shipped table.
const ShippedRuleTable* env_table() {
  static const ShippedRuleTable* const t = [] {
    const char* e = std::getenv("SPARROW_RULE_TABLE_GPU");
    if (e == nullptr || *e == '\0') return static_cast<const ShippedRuleTable*>(nullptr);
    const ShippedRuleTable* named = table_named(e);
    if (named == nullptr) {
      std::fprintf(stderr, "sparrow: %s; choosing by the GPU instead\n",
                   rule_table_env_status().message().c_str());
    }
    return named;
  }();
  return t;
}

// The table for device `dev`: its GPU's, else the first, with a note on stderr (the choices then
// follow another GPU's measurements; the caller asks once per device). A device whose name
// cannot be read takes the first too.
const ShippedRuleTable* table_for_device(int dev) {
  const ShippedRuleTable* first = &shipped_rule_tables().front();
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // leave no error behind for the caller's next check
    return first;
  }
  if (const ShippedRuleTable* t = table_named(prop.name)) return t;
  std::fprintf(stderr,
               "sparrow: no shipped rule table was measured on %s (device %d); kernel and format "
               "choices follow the %s's measurements (shipped: %s; SPARROW_RULE_TABLE_GPU picks "
               "one)\n",
               prop.name, dev, first->gpu, shipped_names().c_str());
  return first;
}

}  // namespace

const std::vector<ShippedRuleTable>& shipped_rule_tables() {
  // The first is the default (no GPU, or one no table was measured on): the H100's, which holds
  // the engine-measured exceptions and whole-model engine cells (engine_layer.cpp).
  static const std::vector<ShippedRuleTable> tables = {
      {h100::kGpu, h100::kDate, h100::kCells, std::size(h100::kCells), h100::kDependentMaxN},
      {h200::kGpu, h200::kDate, h200::kCells, std::size(h200::kCells), h200::kDependentMaxN},
  };
  return tables;
}

const ShippedRuleTable& active_rule_table() {
  if (g_forced != nullptr) return *g_forced;
  if (const ShippedRuleTable* t = env_table()) return *t;
  // Whether a CUDA device can be asked at all, once per process: without a driver every runtime
  // call fails, and the lookups run in CPU-only tools and tests.
  static const bool have_device = [] {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    if (!ok) (void)cudaGetLastError();
    return ok;
  }();
  int dev = 0;
  if (!have_device) return shipped_rule_tables().front();
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();  // clears only this call's error: the caller's stay
    return shipped_rule_tables().front();
  }
  if (dev < 0 || dev >= kMaxDevices) return shipped_rule_tables().front();
  // One slot per device ordinal, filled once under a lock (so the note prints once), read
  // without it afterwards.
  static std::array<std::atomic<const ShippedRuleTable*>, kMaxDevices> by_device{};
  static std::mutex fill;
  const ShippedRuleTable* t = by_device[size_t(dev)].load(std::memory_order_acquire);
  if (t == nullptr) {
    std::lock_guard<std::mutex> lock(fill);
    t = by_device[size_t(dev)].load(std::memory_order_relaxed);
    if (t == nullptr) {
      t = table_for_device(dev);
      by_device[size_t(dev)].store(t, std::memory_order_release);
    }
  }
  return *t;
}

ScopedActiveRuleTable::ScopedActiveRuleTable(const char* gpu) : previous_(g_forced) {
  if (const ShippedRuleTable* t = table_named(gpu)) g_forced = t;
}
ScopedActiveRuleTable::~ScopedActiveRuleTable() { g_forced = previous_; }

std::vector<std::string> rule_table_gpus() {
  std::vector<std::string> names;
  for (const ShippedRuleTable& t : shipped_rule_tables()) names.emplace_back(t.gpu);
  return names;
}

Status rule_table_env_status() {
  const char* e = std::getenv("SPARROW_RULE_TABLE_GPU");
  if (e == nullptr || *e == '\0' || table_named(e) != nullptr) return Status::success();
  return invalid_argument(std::string("SPARROW_RULE_TABLE_GPU is \"") + e +
                          "\", but sparrow ships rule tables measured on " + shipped_names() +
                          " only");
}

}  // namespace sparrow
