#include "bench/device_info.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusparse.h>
#include <dlfcn.h>

#include <cstdio>

#include "core/cuda_check.hpp"

namespace sparrow::bench {

namespace {

// The few NVML entry points the header needs, declared here (the toolkit ships no nvml.h on every
// install) and resolved with dlopen so a machine without NVML still benchmarks.
struct Nvml {
  using Device = void*;
  int (*init)() = nullptr;
  int (*handle_by_pci)(const char*, Device*) = nullptr;
  int (*clock_info)(Device, int, unsigned*) = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;
  bool ok = false;

  static Nvml& get() {
    static Nvml n = load();
    return n;
  }
  static Nvml load() {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return n;
    n.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    n.handle_by_pci =
        reinterpret_cast<int (*)(const char*, Device*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.clock_info = reinterpret_cast<int (*)(Device, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    n.driver_version =
        reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    n.ok = n.init && n.handle_by_pci && n.clock_info && n.driver_version && n.init() == 0;
    return n;
  }
};
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2;  // nvmlClockType_t

}  // namespace

void refresh_clocks(DeviceInfo& d) {
  Nvml& nvml = Nvml::get();
  if (!nvml.ok) return;
  char pci[32] = {0};
  if (cudaDeviceGetPCIBusId(pci, sizeof(pci), d.device) != cudaSuccess) return;
  Nvml::Device dev = nullptr;
  if (nvml.handle_by_pci(pci, &dev) != 0) return;
  unsigned mhz = 0;
  if (nvml.clock_info(dev, kNvmlClockSm, &mhz) == 0) d.sm_clock_now_mhz = int(mhz);
  if (nvml.clock_info(dev, kNvmlClockMem, &mhz) == 0) d.mem_clock_now_mhz = int(mhz);
}

Result<DeviceInfo> query_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status(Code::no_device, std::string("no usable CUDA GPU (") +
                                       (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
                                       ")");
  }
  DeviceInfo d;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&d.device));
  cudaDeviceProp prop{};
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, d.device));
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.memory_bytes = int64_t(prop.totalGlobalMem);
  auto attr = [&d](cudaDeviceAttr a) {
    int v = 0;
    cudaDeviceGetAttribute(&v, a, d.device);
    return v;
  };
  d.l2_bytes = attr(cudaDevAttrL2CacheSize);
  d.sm_clock_peak_mhz = attr(cudaDevAttrClockRate) / 1000;
  d.mem_clock_peak_mhz = attr(cudaDevAttrMemoryClockRate) / 1000;
  d.bus_width_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
  d.theoretical_gbps = 2.0 * d.mem_clock_peak_mhz * 1e6 * (d.bus_width_bits / 8.0) / 1e9;
  cudaDriverGetVersion(&d.driver_cuda_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  cublasGetProperty(MAJOR_VERSION, &d.cublas_version);
  {
    int major = 0, minor = 0, patch = 0;
    cusparseGetProperty(MAJOR_VERSION, &major);
    cusparseGetProperty(MINOR_VERSION, &minor);
    cusparseGetProperty(PATCH_LEVEL, &patch);
    d.cusparse_version = major * 10000 + minor * 100 + patch;
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    d.cublas_version = d.cublas_version * 10000 + minor * 100 + patch;
  }
  Nvml& nvml = Nvml::get();
  if (nvml.ok) {
    char buf[96] = {0};
    if (nvml.driver_version(buf, sizeof(buf)) == 0) d.driver = buf;
  }
  if (d.driver.empty()) d.driver = "CUDA driver API " + std::to_string(d.driver_cuda_version);
  refresh_clocks(d);
  return d;
}

static std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

static std::string mhz(int v) { return v < 0 ? std::string("n/a (no NVML)") : std::to_string(v) + " MHz"; }

std::vector<std::string> header_lines(const DeviceInfo& d) {
  char buf[512];
  std::vector<std::string> out;
  std::snprintf(buf, sizeof(buf), "gpu: %s (sm_%d%d, %d SMs, %.1f GiB, L2 %.1f MiB)",
                d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count,
                double(d.memory_bytes) / (1 << 30), double(d.l2_bytes) / (1 << 20));
  out.push_back(buf);
  std::snprintf(buf, sizeof(buf),
                "clocks: SM %s now / %d MHz peak, memory %s now / %d MHz peak, bus %d bits "
                "(theoretical %.0f GB/s)",
                mhz(d.sm_clock_now_mhz).c_str(), d.sm_clock_peak_mhz,
                mhz(d.mem_clock_now_mhz).c_str(), d.mem_clock_peak_mhz, d.bus_width_bits,
                d.theoretical_gbps);
  out.push_back(buf);
  std::snprintf(buf, sizeof(buf), "driver: %s (CUDA %s), runtime CUDA %s, cuBLAS %d, cuSPARSE %d",
                d.driver.c_str(), cuda_version_string(d.driver_cuda_version).c_str(),
                cuda_version_string(d.runtime_version).c_str(), d.cublas_version,
                d.cusparse_version);
  out.push_back(buf);
  return out;
}

nlohmann::json to_json(const DeviceInfo& d) {
  return {{"name", d.name},
          {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
          {"sm_count", d.sm_count},
          {"l2_bytes", d.l2_bytes},
          {"memory_bytes", d.memory_bytes},
          {"sm_clock_peak_mhz", d.sm_clock_peak_mhz},
          {"mem_clock_peak_mhz", d.mem_clock_peak_mhz},
          {"sm_clock_now_mhz", d.sm_clock_now_mhz},
          {"mem_clock_now_mhz", d.mem_clock_now_mhz},
          {"bus_width_bits", d.bus_width_bits},
          {"theoretical_gbps", d.theoretical_gbps},
          {"driver", d.driver},
          {"driver_cuda_version", d.driver_cuda_version},
          {"runtime_version", d.runtime_version},
          {"cublas_version", d.cublas_version},
          {"cusparse_version", d.cusparse_version}};
}

}  // namespace sparrow::bench
