// Internal: rebuilding a Weight from its named arrays and metadata (the inverse of
// weight_arrays / weight_metadata in sparrow/io/checkpoint.hpp).
#pragma once

#include <functional>
#include <string>

#include "sparrow/io/checkpoint.hpp"

namespace sparrow::io::detail {

// Looks up a stored array by full tensor name; error when absent.
using ArrayLookup = std::function<Result<TensorView>(const std::string&)>;

// Parses the "sparrow:<name>" metadata JSON.
Result<SparseTensorInfo> parse_weight_metadata(const std::string& name, const std::string& json);

// Rebuilds and validates the Weight `name` described by `meta_json`.
Result<Weight> read_weight(const std::string& name, const std::string& meta_json,
                           const ArrayLookup& lookup);

}  // namespace sparrow::io::detail
