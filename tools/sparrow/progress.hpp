// A one-line progress bar on stderr, redrawn in place; silent when stderr is not a terminal (so
// logs and tests see only the final output).
#pragma once

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

namespace sparrow::cli {

// Ctrl-C / SIGTERM during a long write: the handler only sets this flag; the library stops at
// the next tensor and removes its temporary directory.
inline volatile std::sig_atomic_t g_interrupted = 0;
inline void install_interrupt_handler() {
  auto handler = [](int) { g_interrupted = 1; };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
}

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(2) != 0) {}
  ~ProgressBar() { finish(); }
  void update(double fraction, const std::string& what) {
    if (!tty_) return;
    constexpr int kWidth = 30;
    const int filled = int(fraction * kWidth + 0.5);
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    std::string item = what.size() > 48 ? "..." + what.substr(what.size() - 45) : what;
    std::fprintf(stderr, "\r%s [%s] %5.1f%% %-48s", label_.c_str(), bar.c_str(), 100.0 * fraction,
                 item.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (tty_ && drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  std::string label_;
  bool tty_;
  bool drawn_ = false;
};

}  // namespace sparrow::cli
