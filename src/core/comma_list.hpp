// The comma lists sparrow reads: the engine's experiment knobs ("o=tca_bme.mma, down=macko.warp_row",
// "o,down", "blocks_per_sm=1,early_kib=96") and the per-matmul format list
// ("qkv=dense,o=dense,gate_up=tca_bme,down=tca_bme") of bench-model and prune. One splitting for
// all of them, so they agree on spaces and empty fields.
#pragma once

#include <string>
#include <vector>

namespace sparrow {

// `s` without leading and trailing spaces and tabs.
std::string trim(const std::string& s);

// The comma-separated fields of `s`, each trimmed; none for a blank `s`. Empty fields ("a,,b",
// "a,") are kept as "", so callers refuse them instead of skipping a value that was lost.
std::vector<std::string> split_list(const std::string& s);

// "key=value" split at the first '=' (both trimmed); `has_value` false when there is no '='.
struct KeyValue {
  std::string key, value;
  bool has_value = false;
};
KeyValue split_key_value(const std::string& item);

}  // namespace sparrow
