// The whole public API.
#pragma once

#include "sparrow/buffer.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/dtype.hpp"
#include "sparrow/matrix.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/reference.hpp"
#include "sparrow/status.hpp"
#include "sparrow/version.hpp"
#include "sparrow/matmul.hpp"
#include "sparrow/weight.hpp"
