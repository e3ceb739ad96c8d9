// Helpers for CPU tests that run the `sparrow` CLI (SPARROW_CLI_PATH) in a scratch directory.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace sparrow::test {

// A fresh directory under the system's temp folder, removed with the object; `tag` and the
// process id keep parallel tests apart.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() /
             ("sparrow_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// What run_cli does with the command's stderr: merged into the output, or dropped (tests that
// compare stdout byte for byte, or parse it as JSON).
enum class Stderr { merge, drop };

// Runs `sparrow ARGS`; returns its stdout (with stderr, by default) and sets `code` to the exit
// status (-1 when it did not exit normally).
inline std::string run_cli(const std::string& args, int& code, Stderr err = Stderr::merge) {
  const std::string cmd = std::string(SPARROW_CLI_PATH) + " " + args +
                          (err == Stderr::merge ? " 2>&1" : " 2>/dev/null");
  std::string out;
  code = -1;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = pclose(p);
  code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// The same as one value: the exit status and the merged output.
struct CliRun {
  int code = -1;
  std::string out;
};
inline CliRun run_cli(const std::string& args) {
  CliRun r;
  r.out = run_cli(args, r.code);
  return r;
}

// The ids of `sparrow run --tokens`'s "tokens: 5 17 ..." line (empty when there is none).
inline std::vector<int32_t> tokens_line(const std::string& out) {
  std::vector<int32_t> ids;
  const size_t at = out.find("tokens:");
  if (at == std::string::npos) return ids;
  std::istringstream line(out.substr(at + 7, out.find('\n', at) - at - 7));
  for (int32_t id; line >> id;) ids.push_back(id);
  return ids;
}

}  // namespace sparrow::test
