#pragma once

namespace sparrow {
constexpr const char* kVersion = "0.1.0";
// The git revision the library was built from ("unknown" outside a checkout).
const char* git_revision();
}  // namespace sparrow
