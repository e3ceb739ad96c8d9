// A one-line progress bar on stderr, redrawn in place; silent when stderr is not a terminal (so
// logs and tests see only the final output).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace sparrow::cli {

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
