// What the benchmark header says about the machine: GPU, clocks, memory, driver and library
// versions. Clocks in use come from NVML when the driver's libnvidia-ml is there (loaded at run
// time, so no link dependency); peak clocks from the CUDA runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparrow/status.hpp"

namespace sparrow::bench {

struct DeviceInfo {
  int device = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  int sm_clock_peak_mhz = 0, mem_clock_peak_mhz = 0, bus_width_bits = 0;
  int sm_clock_now_mhz = -1, mem_clock_now_mhz = -1;  // -1: NVML not available
  double theoretical_gbps = 0;                          // 2 * mem clock * bus width (DDR)
  std::string driver;                                   // NVML's string, else the CUDA number
  int driver_cuda_version = 0, runtime_version = 0, cublas_version = 0, cusparse_version = 0;
};

// Fails with no_device when there is no usable GPU.
Result<DeviceInfo> query_device();

// Re-reads the clocks in use (NVML) so the header can show them after the warm-up.
void refresh_clocks(DeviceInfo& d);

// "# key: value" lines for the human table and the CSV header; the same keys in JSON.
std::vector<std::string> header_lines(const DeviceInfo& d);
nlohmann::json to_json(const DeviceInfo& d);

}  // namespace sparrow::bench
